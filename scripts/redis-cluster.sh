#!/usr/bin/env bash
# A Redis Cluster of three masters on loopback, for the tests: `start` (idempotent) prints nothing on
# success and leaves the nodes running; `stop` shuts them down and removes their files.
#
#   scripts/redis-cluster.sh start|stop|status
#
# Ports: RATEWINDOW_CLUSTER_PORTS (default "7101 7102 7103"). Files: $TMPDIR/ratewindow-cluster.
set -euo pipefail
ports=(${RATEWINDOW_CLUSTER_PORTS:-7101 7102 7103})
dir="${TMPDIR:-/tmp}/ratewindow-cluster"

healthy() {
  redis-cli -p "${ports[0]}" cluster info 2> /dev/null | grep -q '^cluster_state:ok'
}

start() {
  if healthy; then return 0; fi
  stop > /dev/null 2>&1 || true
  mkdir -p "$dir"
  for port in "${ports[@]}"; do
    mkdir -p "$dir/$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "$dir/$port/nodes.conf" --cluster-node-timeout 2000 \
      --save "" --appendonly no --dir "$dir/$port" --logfile "$dir/$port/log" --daemonize yes
  done
  for port in "${ports[@]}"; do
    for _ in $(seq 50); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.1; done
  done
  local nodes=()
  for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes > "$dir/create.log" 2>&1
  for _ in $(seq 100); do
    if healthy; then return 0; fi
    sleep 0.1
  done
  echo "the Redis Cluster did not become healthy; see $dir" >&2
  return 1
}

stop() {
  for port in "${ports[@]}"; do
    redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) healthy && echo ok || { echo "not running"; exit 1; } ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
