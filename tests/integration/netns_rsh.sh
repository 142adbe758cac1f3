#!/bin/sh
# mpirun's remote shell (--mca plm_rsh_agent) for hosts that are network namespaces on this
# machine: `netns_rsh.sh [OPTIONS] HOST COMMAND...` runs COMMAND in the namespace that
# STARLING_NETNS_MAP ("host=namespace,...") names for HOST, as ssh would run it on that host.
while [ $# -gt 0 ]; do
  case "$1" in -*) shift ;; *) break ;; esac
done
host=$1
shift
ns=$(printf '%s\n' "$STARLING_NETNS_MAP" | tr ',' '\n' | sed -n "s/^$host=//p" | head -n 1)
if [ -z "$ns" ]; then
  echo "netns_rsh.sh: no namespace for host '$host' in STARLING_NETNS_MAP='$STARLING_NETNS_MAP'" >&2
  exit 255
fi
exec ip netns exec "$ns" sh -c "$*"
