"""The batch-A table of docs/compression.md from finished runs' summary.json files.

    python scripts/compression_table.py RUN_DIR [RUN_DIR ...] [--json OUT]

Per run: test accuracy, bytes sent per rank per step and the ratio to the
run labelled ``sync``, compress + decompress seconds per step (the time
breakdown; at 4 ranks on 2 cores these are oversubscribed wall times).
"""
import argparse
import json
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for d in map(Path, args.runs):
        s = json.loads((d / "summary.json").read_text())
        tb = s.get("time_breakdown", {})
        rows.append({"run": s["label"], "ranks": s["world_size"], "steps": s["steps"], "epochs": s["epochs"],
                     "test_accuracy": s["test_accuracy"], "bytes_per_rank_per_step": s["bytes_sent_per_step"],
                     "compress_ms": 1e3 * tb.get("compress", 0.0), "decompress_ms": 1e3 * tb.get("decompress", 0.0),
                     "step_ms": 1e3 * s["step_time_s"]})
    sync = next((r["bytes_per_rank_per_step"] for r in rows if r["run"] == "sync"), None)
    print("| method | test acc | bytes/rank/step | ratio to sync | compress ms/step | decompress ms/step |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        r["ratio_to_sync"] = r["bytes_per_rank_per_step"] / sync if sync else None
        ratio = f"{r['ratio_to_sync']:.4f}" if sync else "-"
        print(f"| {r['run']} | {r['test_accuracy']:.4f} | {r['bytes_per_rank_per_step']:.0f} | {ratio} | "
              f"{r['compress_ms']:.2f} | {r['decompress_ms']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
