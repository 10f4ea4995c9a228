"""Two bench_ops outputs side by side: each stability row's median before and after, their ratio,
and the median and range of the ratios.

    python benchmarks/compare_ops.py BEFORE.md AFTER.md
"""

import statistics
import sys


def rows(path):
    out = {}
    for line in open(path):
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if line.startswith("stability |") and len(parts) >= 6:
            out[("stability",) + tuple(parts[1:4])] = float(parts[4])
        elif line.startswith("|") and len(parts) == 7 and parts[0].startswith("Hamlet"):
            try:
                out[("speedup",) + tuple(parts[:3])] = (
                    float(parts[3]),
                    float(parts[4]),
                    float(parts[6].rstrip("x")),
                )
            except ValueError:
                pass
    return out


b, a = rows(sys.argv[1]), rows(sys.argv[2])
print("| workload | operator | plan | before median ms | after median ms | after / before |")
print("|---|---|---|---|---|---|")
ratios = []
for k in b:
    if k in a and k[0] == "stability":
        r = a[k] / b[k]
        ratios.append(r)
        print(f"| {k[1]} | {k[2]} | {k[3]} | {b[k]:.2f} | {a[k]:.2f} | {r:.2f} |")

print(
    f"\nafter/before over {len(ratios)} rows: median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}"
)
