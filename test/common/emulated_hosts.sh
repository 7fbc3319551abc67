# shellcheck shell=sh
# Emulated hosts for the test scripts (sourced): network namespaces PREFIX1..PREFIXn on a bridge
# of their own, addresses NET.1..NET.n (the bridge NET.254), and an rsh agent for mpirun that
# runs a command on "host" NET.i inside namespace i under the hostname PREFIXi (shared-memory
# segments are named by host). Root and iproute2 only.
#   emulated_hosts_remove PREFIX BRIDGE COUNT
#   emulated_hosts_make PREFIX BRIDGE NET COUNT   (fails when namespaces cannot be made)
#   emulated_hosts_agent PREFIX FILE              (writes the agent)

emulated_hosts_remove() {
  for i in $(seq 1 "$3"); do
    ip netns pids "$1$i" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$1$i" 2>/dev/null
    # The kernel tears a namespace down in the background: its end of the pair may outlive
    # the name for a while, and a run right after would find the name taken.
    ip link del "veth-$1$i" 2>/dev/null
  done
  ip link del "$2" 2>/dev/null
}

emulated_hosts_make() {
  ip link add "$2" type bridge && ip addr add "$3.254/24" dev "$2" && ip link set "$2" up ||
    return 1
  for i in $(seq 1 "$4"); do
    ip netns add "$1$i" &&
      ip link add "veth-$1$i" type veth peer name eth0 netns "$1$i" &&
      ip link set "veth-$1$i" master "$2" up &&
      ip -n "$1$i" addr add "$3.$i/24" dev eth0 &&
      ip -n "$1$i" link set eth0 up && ip -n "$1$i" link set lo up || return 1
  done
}

emulated_hosts_agent() {
  cat > "$2" <<AGENT
#!/bin/sh
host=\$1; shift
index=\${host##*.}
exec nsenter --net=/var/run/netns/$1\$index unshare --uts sh -c "hostname $1\$index; \$*"
AGENT
  chmod +x "$2"
}
