# Sourced by the test scripts: makes sure the servers the tests talk to are running, starting them
# with this machine's own commands when they are not. Never stops a server it did not start.

redis_up() {
  if redis-cli -h 127.0.0.1 -p 6379 ping > /dev/null 2>&1; then return 0; fi
  echo "starting Redis on 127.0.0.1:6379" >&2
  mkdir -p /var/lib/redis /var/log/redis 2> /dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 50); do
    redis-cli -h 127.0.0.1 -p 6379 ping > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "Redis did not start" >&2
  return 1
}

postgres_up() {
  if pg_isready -h 127.0.0.1 -p 5432 > /dev/null 2>&1; then return 0; fi
  echo "starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 100); do
    pg_isready -h 127.0.0.1 -p 5432 > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "PostgreSQL did not start" >&2
  return 1
}
