#!/usr/bin/env bash
# Mutation score of memory/systems/ per arm (mutmut 3), on a throw-away copy of the checkout.
#
#   bash bench/mutation.sh [--max-children N] [--only ARM,ARM,...]
#   bash bench/mutation.sh --resume DIR [--max-children N]    # re-test DIR's survivors, then finish DIR
#   bash bench/mutation.sh --table DIR                        # the table of DIR so far (also mid-run)
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
#
# --resume DIR: for a run that was stopped or that predates new tests. Copies the current memory/
# tests into DIR (refusing if memory/systems/ changed since, as the mutants would be stale), re-runs
# DIR's survivors by name (mutmut re-tests named mutants with the current tests; killed ones stay
# killed, as adding tests cannot revive a mutant), then lets mutmut run the mutants not yet checked.
# --table DIR: the table from mutmut's meta files, i.e. whatever is finished (mutmut writes them as
# it goes); "other" then includes the mutants not yet checked.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CHILDREN=2
ONLY=""
RESUME=""
TABLE=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --max-children) CHILDREN="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --resume) RESUME="$2"; shift 2 ;;
    --table) TABLE="$2"; shift 2 ;;
    *) echo "usage: bash bench/mutation.sh [--max-children N] [--only ARM,ARM,...] [--resume DIR] [--table DIR]" >&2
       exit 2 ;;
  esac
done

# Per file of memory/systems/: killed / survived / other from mutmut's meta files (exit codes as
# mutmut's status_by_exit_code: 1 and 3 killed, 0 survived); writes survivors.txt.
table() {
  "$PY" - <<'PYEOF'
import collections, glob, json, os
counts = collections.defaultdict(collections.Counter)
survivors = []
for meta in sorted(glob.glob("mutants/memory/systems/*.py.meta")):
    arm = os.path.basename(meta).removesuffix(".py.meta")
    for name, code in json.load(open(meta, encoding="utf-8"))["exit_code_by_key"].items():
        status = "killed" if code in (1, 3) else "survived" if code == 0 else "other"
        counts[arm][status] += 1
        if status == "survived":
            survivors.append(name)
open("survivors.txt", "w").write("\n".join(survivors) + "\n")
print(f"{'file':<20} {'killed':>7} {'survived':>9} {'other':>6} {'score':>7}")
total = collections.Counter()
for arm in sorted(counts):
    c = counts[arm]
    k, s = c["killed"], c["survived"]
    total.update(c)
    print(f"{arm:<20} {k:>7} {s:>9} {c['other']:>6} {k / (k + s) if k + s else float('nan'):>7.1%}")
k, s = total["killed"], total["survived"]
print(f"{'all':<20} {k:>7} {s:>9} {total['other']:>6} {k / (k + s) if k + s else float('nan'):>7.1%}")
PYEOF
}

if [[ -n "$TABLE" ]]; then
  cd "$TABLE" && table
  exit 0
fi
if [[ -n "$RESUME" ]]; then
  cd "$ROOT"
  for f in memory/systems/*.py; do
    cmp -s "$f" "$RESUME/$f" || { echo "$f changed since $RESUME was mutated: start a new run" >&2; exit 2; }
  done
  git ls-files -co --exclude-standard -z memory/tests | xargs -0 -I{} cp --parents {} "$RESUME/"
  cd "$RESUME"
  table > /dev/null
  echo "mutation run resumed in $RESUME: re-testing $(grep -c . survivors.txt) survivors" >&2
  if [[ -s survivors.txt ]]; then
    xargs -a survivors.txt "$PY" -m mutmut run --max-children "$CHILDREN" >> run.log 2>&1 || { tail -20 run.log; exit 1; }
  fi
  "$PY" -m mutmut run --max-children "$CHILDREN" >> run.log 2>&1 || { tail -20 run.log; exit 1; }
  table
  echo "survivors: $RESUME/survivors.txt" >&2
  exit 0
fi

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
table
echo "survivors: $WORK/survivors.txt" >&2
