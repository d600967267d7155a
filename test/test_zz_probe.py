import json, requests
from public_bugs_testutil import MODEL, post, sse

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
TOOLS = [{"type": "function", "function": {"name": "dummy_function_name", "description": "d", "parameters": SCHEMA}}]
MSG = [{"role": "system", "content": "you are a helpful assistant"}, {"role": "user", "content": "Give an example JSON for an employee profile."}]

def test_probe(more_bugs_server):
    s = more_bugs_server
    out = []
    named = {"type": "function", "function": {"name": "dummy_function_name"}}
    for tc in (named, "required"):
        for think in (False, True):
            body = {"model": MODEL, "messages": MSG, "tools": TOOLS, "tool_choice": tc, "temperature": 0, "max_completion_tokens": 200, "chat_template_kwargs": {"thinking": think}}
            r = post(s, "/v1/chat/completions", body)
            out.append(f"{tc} think={think} -> {r.status_code} {json.dumps(r.json()['choices'][0])[:600]}")
            ch = sse(s, "/v1/chat/completions", body)
            deltas = [c["choices"][0] for c in ch if c["choices"]]
            out.append("  stream: contents=%r fr=%r args=%r" % ([d["delta"].get("content") for d in deltas], [d["finish_reason"] for d in deltas if d["finish_reason"]], "".join((d["delta"].get("tool_calls") or [{}])[0].get("function", {}).get("arguments") or "" for d in deltas)))
        body = {"model": MODEL, "messages": MSG, "tools": TOOLS, "tool_choice": tc, "temperature": 0, "max_completion_tokens": 1}
        r = post(s, "/v1/chat/completions", body)
        out.append(f"max1 {tc} -> {r.status_code} {json.dumps(r.json()['choices'][0])[:400]}")
    for body in (
        {"model": MODEL, "messages": MSG, "tool_choice": named},
        {"model": MODEL, "messages": MSG, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nondefined"}}},
        {"model": MODEL, "messages": MSG, "tools": TOOLS, "tool_choice": {}},
        {"model": MODEL, "messages": MSG, "tool_choice": "required"},
    ):
        r = post(s, "/v1/chat/completions", {**body, "max_completion_tokens": 3})
        out.append(f"bad {json.dumps(body['tool_choice'])} -> {r.status_code} {r.text[:250]}")
    open("/tmp/v19/probe.txt", "w").write("\n".join(out))
