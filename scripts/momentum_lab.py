"""Issue 43's first candidate, momentum compensation for the delay, asked of the staleness lab before
any network run (docs/accuracy.md section 11.6): does lowering the momentum (at the same effective
rate lr / (1 - mu), as "asynchrony begets momentum" suggests: Mitliagkas, Zhang, Hadjis & Re, 2016)
raise ``local``'s largest stable learning rate relative to synchronous SGD's?

For each momentum mu (Nesterov when mu > 0): the noise-free largest stable ``h * lr`` of synchronous
SGD and of a rank's difference from the ranks' mean under ``local`` (k = 1,
:func:`minips.labs.stability.largest_stable_steps`), and the largest stable lr of both with per-rank
noise on P = 32 ranks of batch 16 (:func:`minips.labs.staleness.largest_stable_lr`, seeds 0-1).
Prints a markdown table (about a minute):

    python scripts/momentum_lab.py > docs/bench/scale/screen-43/momentum-lab.txt
"""
from minips.labs.stability import largest_stable_steps
from minips.labs.staleness import LeastSquares, largest_stable_lr


def main(momenta=(0.9, 0.8, 0.5, 0.0), P=32):
    problem = LeastSquares()
    print(f"# python scripts/momentum_lab.py (k = 1; noisy: P = {P}, per-rank batch 16, 400 steps, seeds 0-1)\n")
    print("| momentum | noise-free: sync h lr | local's difference h lr | ratio | noisy: sync lr | local lr | ratio "
          "| local lr / (1 - mu) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mu in momenta:
        t = largest_stable_steps(1, mu, nesterov=mu > 0)
        s0, d0 = t["synchronous"], t["local_deviation"]
        s = largest_stable_lr(problem, P, None, 16, 400, (0, 1), momentum=mu, nesterov=mu > 0)
        loc = largest_stable_lr(problem, P, "local", 16, 400, (0, 1), momentum=mu, nesterov=mu > 0, hi=6.0)
        print(f"| {mu} | {s0:.3f} | {d0:.3f} | {d0 / s0:.3f} | {s:.4f} | {loc:.4f} | {loc / s:.3f} "
              f"| {loc / (1 - mu):.3f} |", flush=True)


if __name__ == "__main__":
    main()
