#!/usr/bin/env bash
# Runs a command with a throw-away PostgreSQL and Redis on loopback, then stops them.
#   scripts/with-services.sh .venv/bin/python -m pytest -m postgres
# Exports DATABASE_URL and REDIS_URL for the command. MEMEVAL_PGOPTS adds server options, e.g.
#   MEMEVAL_PGOPTS="-c shared_preload_libraries=pg_stat_statements" (for profiling a benchmark).
set -euo pipefail
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n1)")
TMP=$(mktemp -d /tmp/memeval-services.XXXXXX)
chmod 755 "$TMP"
PGPORT=${MEMEVAL_PGPORT:-55432}
REDISPORT=${MEMEVAL_REDISPORT:-56379}
RUNAS=()
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  chown postgres "$TMP"
  RUNAS=(runuser -u postgres --)
fi
cleanup() {
  "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg" -m immediate stop >/dev/null 2>&1 || true
  [ -f "$TMP/redis.pid" ] && kill "$(cat "$TMP/redis.pid")" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
"${RUNAS[@]}" "$PGBIN/initdb" -D "$TMP/pg" -U memeval --auth=trust -E UTF8 >/dev/null
"${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg" -l "$TMP/pg.log" -w \
  -o "-h 127.0.0.1 -p $PGPORT -k $TMP -c max_connections=200 -c fsync=off ${MEMEVAL_PGOPTS:-}" start >/dev/null
redis-server --port "$REDISPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
  --pidfile "$TMP/redis.pid" --logfile "$TMP/redis.log"
for _ in $(seq 50); do redis-cli -p "$REDISPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U memeval memeval
export DATABASE_URL="postgres://memeval@127.0.0.1:$PGPORT/memeval"
export REDIS_URL="redis://127.0.0.1:$REDISPORT/0"
echo "services: $DATABASE_URL $REDIS_URL"
"$@"
