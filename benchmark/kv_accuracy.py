"""Accuracy of the low-precision KV formats on long prompts.

Runs the runtime model (``ModelRunner``: weights loaded once) on long prompts with the KV pool
in each format and compares it with a reference format (fp32 by default, and bf16):

* ``fp32`` / ``bf16``: float KV entries; ``fp8``: ``--kv-cache-dtype fp8_e4m3`` (584-byte-layout
  entries, fp8 indexer keys); ``fp8_fp4``: plus ``--enable-fp4-indexer`` (fp4 e2m1 indexer keys).

For each prompt (``--prompt-len`` random token ids):

1. the reference format prefills the prompt (chunks of ``--chunk`` tokens) and decodes
   ``--decode-steps`` greedy tokens ``C_ref``;
2. every format prefills ``prompt + C_ref`` in the same chunks with logits at every position:
   the *prompt logprobs* (log-probability of each next prompt token; ``|Δ logprob|`` against the
   reference, max and mean over prompt positions) and the *teacher-forced greedy agreement*
   (fraction of the ``C_ref`` positions where the format's argmax equals ``C_ref``);
3. every format decodes ``--decode-steps`` greedy tokens on its own from the prompt
   (*free-running agreement*: fraction of positions equal to ``C_ref``, and the first index where
   they differ).

``--controls`` adds negative controls (fp32 storage with broken reads: SWA shifted by one slot,
CSA main or HCA entries read as zeros) to calibrate how much a real cache bug moves the numbers.

The reference's median top-1 / top-2 logit gap over the prompt positions is printed too: with
random weights the distributions are flat, so a small perturbation can flip the argmax.

Usage (repository root, venv active)::

    python benchmark/kv_accuracy.py                      # embedded default model (tiny preset)
    python benchmark/kv_accuracy.py --model-path DIR --prompt-len 4096 --num-prompts 2
    python benchmark/kv_accuracy.py --json out.json

Prints a markdown table (one row per format and baseline).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from typing import Any

import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ReqForwardInput
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.server_args import ServerArgs

FORMATS: dict[str, tuple[str, bool]] = {
    "fp32": ("fp32", False),
    "bf16": ("bf16", False),
    "fp8": ("fp8_e4m3", False),
    "fp8_fp4": ("fp8_e4m3", True),
}
PAGE = 256
# negative controls (``--controls``): fp32 storage with deliberately broken reads, to show how far a
# real cache bug moves the same statistics on this model
CONTROLS = {
    "ctl_swa_shift": "sliding-window reads shifted by one slot",
    "ctl_csa_zero": "CSA main entries read as zeros",
    "ctl_hca_zero": "HCA entries read as zeros",
}


class _BrokenView:
    """A flat fp32 pool whose reads are wrong in one way (writes are exact)."""

    def __init__(self, flat: torch.Tensor, mode: str) -> None:
        self.flat, self.mode = flat, mode
        self.shape, self.dtype, self.device = flat.shape, flat.dtype, flat.device

    def __len__(self) -> int:
        return self.flat.shape[0]

    def __setitem__(self, idx: Any, x: torch.Tensor) -> None:
        self.flat[idx] = x

    def __getitem__(self, idx: Any) -> torch.Tensor:
        if self.mode == "shift":
            return self.flat[(idx + 1) % self.flat.shape[0]]
        return torch.zeros_like(self.flat[idx])


class _BrokenPool(DSV4KVPool):
    control = ""
    _BROKEN = {
        "ctl_swa_shift": (KVKind.SWA, "shift"),
        "ctl_csa_zero": (KVKind.CSA_MAIN, "zero"),
        "ctl_hca_zero": (KVKind.HCA, "zero"),
    }

    def rows(self, kind: KVKind, layer: int) -> Any:
        f = super().rows(kind, layer)
        broken = self._BROKEN.get(self.control)
        return _BrokenView(f, broken[1]) if broken is not None and broken[0] is kind else f


class _Seq:
    """One request on a fresh pool: all its block and window pages allocated up front."""

    def __init__(self, runner: ModelRunner, total_len: int) -> None:
        pool = runner.pool
        self.runner = runner
        self.slot = pool.req_slots.alloc()
        assert self.slot is not None
        pool.reset_req_state(self.slot)
        self.blocks = pool.block_alloc.alloc_or_raise(-(-total_len // PAGE))
        self.wins = dict(enumerate(pool.window_alloc.alloc_or_raise(-(-total_len // pool.window))))
        self.done = 0

    @torch.no_grad()
    def extend(self, ids: list[int], all_logits: bool) -> torch.Tensor:
        """Append ``ids``; returns ``[n, V]`` (all positions) or ``[1, V]`` (last) fp32 logits."""
        n = len(ids)
        r = ReqForwardInput(self.slot, ids, self.done, self.blocks, self.wins, 0 if all_logits else n - 1)
        _, logits = self.runner.forward([r])
        self.done += n
        return logits.float()


def _make_pool(runner: ModelRunner, kv: str, fp4: bool, total_len: int, control: str = "") -> DSV4KVPool:
    mc = runner.mc
    cls = DSV4KVPool
    if control:
        _BrokenPool.control = control
        cls = _BrokenPool
    return cls(
        mc,
        PAGE,
        -(-total_len // PAGE) + 1,
        -(-total_len // mc.sliding_window) + 1,
        1,
        runner.dtype,
        runner.device,
        kv_cache_dtype=kv,
        fp4_indexer=fp4,
    )


def _run_format(
    runner: ModelRunner, prompt: list[int], steps: int, chunk: int, total: int, ref_cont: list[int] | None
) -> dict[str, Any]:
    """Prefill ``prompt`` (logits everywhere), then fork the pool: greedy-decode ``steps`` tokens on
    one copy; feed ``ref_cont`` (teacher forcing, one extend) on the other.

    Returns ``lp`` (``[L-1]`` float64 prompt logprobs), ``gap`` (``[L-1]`` top-1 minus top-2 logit),
    ``free`` (greedy tokens) and ``tf`` (argmax after each prefix of ``ref_cont``; ``ref_cont=None``
    uses this format's own greedy tokens, i.e. the reference run).
    """
    seq = _Seq(runner, total)
    L = len(prompt)
    ids_t = torch.tensor(prompt + [0])
    lps, gaps = [], []
    last = None
    for s in range(0, L, chunk):
        part = prompt[s : s + chunk]
        logits = seq.extend(part, all_logits=True)  # row j predicts prompt[s + j + 1]
        n = min(len(part), L - 1 - s)
        lp = torch.log_softmax(logits[:n].double(), dim=-1)
        lps.append(lp.gather(1, ids_t[s + 1 : s + 1 + n].unsqueeze(1)).squeeze(1))
        top2 = logits[:n].topk(2, dim=-1).values
        gaps.append(top2[:, 0] - top2[:, 1])
        last = logits[-1]
        del logits, lp
    assert last is not None
    fork = copy.deepcopy(runner.pool)
    first = int(last.argmax())
    free = [first]
    while len(free) < steps:
        free.append(int(seq.extend([free[-1]], all_logits=False)[-1].argmax()))
    cont = free if ref_cont is None else ref_cont
    runner.pool, seq.done = fork, L
    tf = torch.tensor([first])
    if len(cont) > 1:
        tf = torch.cat([tf, seq.extend(cont[:-1], all_logits=True).argmax(-1)])
    return {"lp": torch.cat(lps), "gap": torch.cat(gaps), "free": free, "tf": tf}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-path", default=None, help="checkpoint dir (default: embedded tiny model)")
    ap.add_argument("--prompt-len", type=int, default=4096)
    ap.add_argument("--num-prompts", type=int, default=1)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=512, help="prefill chunk (tokens)")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    ap.add_argument("--baselines", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--controls", action="store_true", help="add the broken-cache negative controls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)
    if args.prompt_len < 2 or args.decode_steps < 1 or args.chunk < 1:
        raise SystemExit("--prompt-len >= 2, --decode-steps >= 1 and --chunk >= 1 required")
    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.model_path
    if path is None:
        from sglang_v4.tools.default_model import ensure_default_model

        path = ensure_default_model()
    mc = ModelConfig.from_pretrained(path)
    total = args.prompt_len + args.decode_steps + 1
    t0 = time.perf_counter()
    sa = ServerArgs(
        model_path=path,
        device="cpu",
        dtype="float32",
        page_size=PAGE,
        max_total_tokens=4 * PAGE,
        max_running_requests=1,
        context_length=total + PAGE,
    )
    runner = ModelRunner(mc, sa)
    formats = list(dict.fromkeys(args.baselines + args.formats)) + (list(CONTROLS) if args.controls else [])
    g = torch.Generator().manual_seed(args.seed)
    per: dict[str, dict[str, list[Any]]] = {f: {"lp": [], "tf": [], "free": []} for f in formats}
    ref_name = args.baselines[0]
    ref_conts, ref_gaps = [], []
    order = [ref_name] + [f for f in formats if f != ref_name]
    for p in range(args.num_prompts):
        prompt = torch.randint(2, mc.vocab_size, (args.prompt_len,), generator=g).tolist()
        cont: list[int] | None = None
        for f in order:
            t = time.perf_counter()
            if f in CONTROLS:
                runner.pool = _make_pool(runner, "fp32", False, total, control=f)
            else:
                runner.pool = _make_pool(runner, *FORMATS[f], total)
            r = _run_format(runner, prompt, args.decode_steps, args.chunk, total, cont)
            if f == ref_name:
                cont = r["free"]
                ref_conts.append(cont)
                ref_gaps.append(r["gap"])
            per[f]["lp"].append(r["lp"])
            per[f]["tf"].append(r["tf"])
            per[f]["free"].append(r["free"])
            print(f"prompt {p}: {f} done in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    rows = []
    for base in args.baselines:
        for f in formats:
            if f == base or (f in args.baselines and args.baselines.index(f) < args.baselines.index(base)):
                continue
            d = torch.cat([(a - b).abs() for a, b in zip(per[f]["lp"], per[base]["lp"])])
            tf_agree = sum(int((a == torch.tensor(c)).sum()) for a, c in zip(per[f]["tf"], ref_conts)) / (
                args.decode_steps * args.num_prompts
            )
            tf_vs_base = sum(int((a == b).sum()) for a, b in zip(per[f]["tf"], per[base]["tf"])) / (
                args.decode_steps * args.num_prompts
            )
            free_agree, first_div = [], []
            for a, b in zip(per[f]["free"], per[base]["free"]):
                free_agree.append(sum(int(x == y) for x, y in zip(a, b)) / len(a))
                first_div.append(next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)))
            rows.append(
                {
                    "format": f,
                    "baseline": base,
                    "positions": int(d.numel()),
                    "max_abs_dlogprob": float(d.max()),
                    "mean_abs_dlogprob": float(d.mean()),
                    "p99_abs_dlogprob": float(d.quantile(0.99)),
                    "teacher_forced_agreement": tf_vs_base,
                    "teacher_forced_agreement_vs_ref_tokens": tf_agree,
                    "free_running_agreement": sum(free_agree) / len(free_agree),
                    "first_divergence": first_div,
                }
            )
    gaps = torch.cat(ref_gaps)
    # sanity of the fork: the reference's teacher-forced argmax reproduces its own greedy tokens
    self_tf = sum(int((a == torch.tensor(c)).sum()) for a, c in zip(per[ref_name]["tf"], ref_conts)) / (
        args.decode_steps * args.num_prompts
    )
    result = {
        "model_path": path,
        "prompt_len": args.prompt_len,
        "num_prompts": args.num_prompts,
        "decode_steps": args.decode_steps,
        "chunk": args.chunk,
        "reference": ref_name,
        "ref_median_top1_top2_logit_gap": float(gaps.median()),
        "ref_mean_prompt_logprob": float(torch.cat(per[ref_name]["lp"]).mean()),
        "ref_self_teacher_forced_agreement": self_tf,
        "seconds": time.perf_counter() - t0,
        "rows": rows,
    }
    print(
        f"model {path}, {args.num_prompts} prompt(s) x {args.prompt_len} tokens, "
        f"{args.decode_steps} greedy steps, chunk {args.chunk}; reference {ref_name}: median top1-top2 "
        f"logit gap {result['ref_median_top1_top2_logit_gap']:.3f}, mean prompt logprob "
        f"{result['ref_mean_prompt_logprob']:.3f}, teacher-forced vs own greedy {100 * self_tf:.1f}%; "
        f"{result['seconds']:.0f} s"
    )
    print()
    print(
        "| KV format | vs | prompt positions | max abs dlogprob | mean abs dlogprob | p99 abs dlogprob "
        "| teacher-forced greedy agreement | free-running greedy agreement | first divergence |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['format']} | {r['baseline']} | {r['positions']} | {r['max_abs_dlogprob']:.4f} | "
            f"{r['mean_abs_dlogprob']:.5f} | {r['p99_abs_dlogprob']:.4f} | "
            f"{100 * r['teacher_forced_agreement']:.1f}% | {100 * r['free_running_agreement']:.1f}% | "
            f"{r['first_divergence']} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
