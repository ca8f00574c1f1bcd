#!/usr/bin/env bash
# Mutation score of memory/systems/ per arm (mutmut 3), on a throw-away copy of the checkout.
#
#   bash bench/mutation.sh [--max-children N] [--only ARM,ARM,...]
#
# --max-children: default 2 (the team machine has 2 cores). --only: mutate only those files of
# memory/systems/ (e.g. --only memgpt,mem0,a_mem,rsum,bm25; ~20 min instead of an hour), by setting
# mutmut's only_mutate in the copy's pyproject.toml.
#
# Copies the tracked files of memory/ and pyproject.toml into a temporary directory (so the work
# tree gets no mutants/ folder and uncommitted files are included as they are), runs `mutmut run`
# there with the [tool.mutmut] settings of pyproject.toml (memory tests only, no Django), and prints
# killed / survived / other per file of memory/systems/ and the score = killed / (killed + survived).
# Survivors are listed in $WORK/survivors.txt; `cd $WORK && mutmut show <name>` shows one.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CHILDREN=2
ONLY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max-children) CHILDREN="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "usage: bash bench/mutation.sh [--max-children N] [--only ARM,ARM,...]" >&2; exit 2 ;;
  esac
done
WORK="$(mktemp -d /tmp/memeval-mutation.XXXXXX)"
cd "$ROOT"
git ls-files -co --exclude-standard -z memory pyproject.toml | xargs -0 -I{} cp --parents {} "$WORK/"
cd "$WORK"
if [[ -n "$ONLY" ]]; then
  # mutmut 3's only_mutate (fnmatch patterns over the source paths) limits the mutants to these files
  PATTERNS=""
  IFS=',' read -ra ARMS <<< "$ONLY"
  for arm in "${ARMS[@]}"; do
    [[ -f "memory/systems/$arm.py" ]] || { echo "no memory/systems/$arm.py" >&2; exit 2; }
    PATTERNS="$PATTERNS\"memory/systems/$arm.py\", "
  done
  sed -i "/^\[tool.mutmut\]/a only_mutate = [${PATTERNS%, }]" pyproject.toml
fi
echo "mutation run in $WORK" >&2
"$PY" -m mutmut run --max-children "$CHILDREN" > run.log 2>&1 || { tail -20 run.log; exit 1; }
"$PY" -m mutmut results --all true > results.txt 2>&1 || true
"$PY" - <<'PYEOF'
import collections, re
counts = collections.defaultdict(collections.Counter)
survivors = []
for line in open("results.txt", encoding="utf-8"):
    m = re.match(r"\s*(memory\.systems\.(\w+)\.\S+): (.+)$", line.strip())
    if not m:
        continue
    name, arm, status = m.group(1), m.group(2), m.group(3).strip()
    counts[arm][status] += 1
    if status == "survived":
        survivors.append(name)
open("survivors.txt", "w").write("\n".join(survivors) + "\n")
print(f"{'file':<20} {'killed':>7} {'survived':>9} {'other':>6} {'score':>7}")
total = collections.Counter()
for arm in sorted(counts):
    c = counts[arm]
    other = sum(v for k, v in c.items() if k not in ("killed", "survived"))
    score = c["killed"] / (c["killed"] + c["survived"]) if c["killed"] + c["survived"] else float("nan")
    total.update(c)
    print(f"{arm:<20} {c['killed']:>7} {c['survived']:>9} {other:>6} {score:>7.1%}")
k, s = total["killed"], total["survived"]
print(f"{'all':<20} {k:>7} {s:>9} {sum(total.values()) - k - s:>6} {k / (k + s) if k + s else float('nan'):>7.1%}")
PYEOF
echo "survivors: $WORK/survivors.txt" >&2
