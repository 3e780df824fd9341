"""The result: per model, per kernel and GEMM rows from the workers' records, and the table."""

from __future__ import annotations

from .common import item_key


def _seconds(record) -> float | None:
    """A record's median, if it ran right."""
    return record.get("median_s") if record.get("ok") else None


def summarize_model(m: dict, res: dict, margin: float, driver: str) -> dict:
    """The model's row: IREE's default, sft's model and verify choices, eager, torch.compile."""
    def record(v):
        return res.get(item_key(v["file"], v.get("driver") or driver)) or {}

    by_name = {v["name"]: v for v in m["variants"]}
    row = {"model": m["name"], "variants": {}}
    for v in m["variants"]:
        r = record(v)
        row["variants"][v["name"]] = {"file": v["file"], "driver": v.get("driver") or driver,
                                      "ok": bool(r.get("ok")), "error": r.get("error"),
                                      "median_s": _seconds(r), "predicted_s": v.get("predicted_s"),
                                      "max_abs_err": r.get("max_abs_err"), "dispatches": v.get("dispatches"),
                                      "plan": v.get("plan")}
    for name, key in (("iree-default", "iree_default_s"), ("sft-model", "sft_model_s")):
        row[key] = _seconds(record(by_name[name])) if name in by_name else None
    timed = {v["name"]: _seconds(record(v)) for v in m["variants"] if v.get("verify")}
    timed = {k: t for k, t in timed.items() if t}
    row["sft_verify"], row["sft_verify_s"] = None, None
    if timed:  # verify's rule: the fastest, unless it beats IREE's default by under the margin
        best = min(timed, key=timed.get)
        if "iree-default" in timed and timed[best] > timed["iree-default"] * (1 - margin):
            best = "iree-default"
        row["sft_verify"], row["sft_verify_s"] = best, timed[best]
    for key in ("eager", "torch_compile"):  # anchors: timed even where numerics differ
        row[f"{key}_s"] = (res.get(key) or {}).get("median_s")
        row[f"{key}_error"] = (res.get(key) or {}).get("error")
    row["predicted_model_s"] = by_name.get("sft-model", {}).get("predicted_s")
    row["predicted_default_s"] = by_name.get("iree-default", {}).get("predicted_s")
    row["failures"] = [f"{v}: {r['error']}" for v, r in row["variants"].items() if r["error"]] + [
        f"prepare {f['variant']}: {f['error']}" for f in m.get("failures", [])]
    row["worker_error"] = res.get("_error")
    return row


def kernel_rows(manifest: dict, results: dict, driver: str) -> list:
    """One row per kernel config: the cost model's prediction beside the measurement."""
    rows = []
    for k in manifest["kernels"]:
        owner = k["users"][0]
        res = results.get(f"kernels:{owner['model']}", {})
        for c in k["candidates"]:
            r = res.get(item_key(c["file"], k["driver"] or driver), {}) if "file" in c \
                else {"error": c.get("error")}
            rows.append({"kernel": f"{owner['model'][:10]}:{owner['op']}",
                         "id": k["id"], "domain": "x".join(map(str, k["domain"])), "roles": k["roles"],
                         "index": c["index"], "rank": c["rank"], "predicted_s": c["predicted_s"],
                         "median_s": r.get("median_s"),
                         "ok": bool(r.get("ok")), "error": r.get("error") or res.get("_error"),
                         "config": c["config_text"], "users": k["users"],
                         "predicted_cores": k["predicted_cores"], "flops": k["flops"]})
    return rows


def gemm_summary(g: dict, res: dict, driver: str) -> dict:
    """The GEMM's rows: each variant's time and rate, beside torch.matmul's."""
    gemm = {k: g[k] for k in ("n", "flops", "peak_flops", "failures", "notes")}
    gemm["rows"] = []
    anchor = (res.get("torch_matmul") or {}).get("median_s")
    for v in g["variants"] + [{"name": "torch.matmul bf16", "file": None}]:
        key = item_key(v["file"], v.get("driver") or driver) if v["file"] else "torch_matmul"
        r = res.get(key, {})
        t = r.get("median_s")
        gemm["rows"].append({"name": v["name"], "median_s": t, "predicted_s": v.get("predicted_s"),
                             "config": v.get("config_text"), "ok": bool(r.get("ok")),
                             "error": r.get("error") or (res.get("_error") if not r else None),
                             "tflops": g["flops"] / t / 1e12 if t else None,
                             "of_torch": anchor / t if t and anchor else None})
    return gemm


def summarize(manifest: dict, results: dict, driver: str) -> tuple[list, list, dict | None]:
    """(model rows, kernel rows, the GEMM's summary or None) of the run."""
    rows = [summarize_model(m, results.get(f"model:{m['name']}", {}), manifest["verify_margin"], driver)
            for m in manifest["models"]]
    gemm = gemm_summary(manifest["gemm"], results.get("gemm", {}), driver) if manifest.get("gemm") else None
    return rows, kernel_rows(manifest, results, driver), gemm


def ms(seconds) -> str:
    return f"{seconds * 1e3:9.4f}" if isinstance(seconds, (int, float)) and seconds else f"{'-':>9}"


def ratio(a, b) -> str:
    return f"{a / b:7.2f}x" if a and b else f"{'-':>8}"


def _nan(x, scale: float = 1.0) -> float:
    return x * scale if x else float("nan")


def table(manifest: dict, rows: list, kernels: list, gemm: dict | None) -> str:
    """The result as text: per model, per kernel, the GEMM."""
    lines = []
    head = (f"{'model':<18}{'iree-def':>9}{'sft-model':>10}{'sft-verify':>11}{'eager':>9}{'t.compile':>10}"
            f"{'model/iree':>11}{'verify/iree':>12}{'verify/torch':>13}{'pred model':>11}  verify's pick")
    lines += [f"per model, ms per call ({manifest['target']}, driver {manifest['run_driver']}); "
              "ratios are speed-ups (higher: sft faster)", head, "-" * len(head)]
    for r in rows:
        best_torch = min([t for t in (r["eager_s"], r["torch_compile_s"]) if t], default=None)
        lines.append(f"{r['model']:<18}{ms(r['iree_default_s'])}{ms(r['sft_model_s']):>10}"
                     f"{ms(r['sft_verify_s']):>11}{ms(r['eager_s'])}{ms(r['torch_compile_s']):>10}"
                     f"{ratio(r['iree_default_s'], r['sft_model_s']):>11}"
                     f"{ratio(r['iree_default_s'], r['sft_verify_s']):>12}"
                     f"{ratio(best_torch, r['sft_verify_s']):>13}{ms(r['predicted_model_s']):>11}"
                     f"  {r['sft_verify'] or '-'}")
    failed = [(r["model"], f) for r in rows for f in r["failures"]] + [
        (r["model"], f"worker: {r['worker_error'][:200]}") for r in rows if r["worker_error"]] + [
        (r["model"], f"{k}: {r[k + '_error']}") for r in rows for k in ("eager", "torch_compile")
        if r[k + "_error"]]
    if failed:
        lines.append("failures:")
        lines += [f"  {model}: {text[:240]}" for model, text in failed]
    if kernels:
        head = (f"{'kernel':<16}{'domain':>16}{'roles':>6}{'cand':>6}{'rank':>5}{'pred us':>10}"
                f"{'meas us':>10}{'meas/pred':>10}  ok  config")
        lines += ["", "per kernel (alone): the cost model's prediction beside the measurement",
                  head, "-" * len(head)]
        for k in kernels:
            pred, meas = k["predicted_s"], k["median_s"]
            lines.append(f"{k['kernel']:<16}{k['domain']:>16}{k['roles']:>6}{k['index']:>6}{k['rank']:>5}"
                         f"{_nan(pred, 1e6):>10.2f}{_nan(meas, 1e6):>10.2f}"
                         f"{(meas / pred) if meas and pred else float('nan'):>10.2f}"
                         f"  {'yes' if k['ok'] else 'NO '} {k['config'][:90]}"
                         + (f"  [{k['error'][:80]}]" if k.get("error") else ""))
    if gemm:
        peak = gemm.get("peak_flops")
        title = (f"bf16 GEMM {gemm['n']}^3 (bf16 inputs, f32 accumulation), "
                 f"{gemm['flops'] / 1e9:.4g} GFLOP per call")
        lines += ["", title + (f"; peak {peak / 1e12:.0f} TFLOP/s dense by the datasheet" if peak else "")]
        head = f"  {'variant':<22}{'ms':>9}{'pred ms':>9}{'TFLOP/s':>10}{'% peak':>8}{'% torch':>9}  ok  config"
        lines += [head, "  " + "-" * (len(head) - 2)]
        for v in gemm["rows"]:
            tf = v.get("tflops")
            lines.append(f"  {v['name']:<22}{ms(v['median_s'])}{ms(v.get('predicted_s'))}"
                         + (f"{tf:10.4g}" if tf else f"{'failed':>10}")
                         + (f"{tf * 1e12 / peak * 100:8.1f}" if tf and peak else f"{'-':>8}")
                         # IREE's calls return when the work is done; a rate past the peak
                         # would say that they did not
                         + (" (over the peak: not synchronous?)" if tf and peak and tf * 1e12 > peak * 1.05 else "")
                         + (f"{v['of_torch'] * 100:9.1f}" if v.get("of_torch") else f"{'-':>9}")
                         + f"  {'yes' if v['ok'] else 'NO '} {v.get('config') or ''}"
                         + (f"  [{v['error'][:120]}]" if v.get("error") else ""))
        lines += [f"  {f['variant']}: {f['stage']} failed: {f['error'][:160]}" for f in gemm.get("failures", [])]
        lines += [f"  note: {n}" for n in gemm.get("notes", [])]
    return "\n".join(lines)
