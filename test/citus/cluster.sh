# test/citus/cluster.sh: a Citus cluster on loopback, for test/citus/run
# and bench/citus.  Sourced, not run.
#
# Builds Citus from the shared source (scripts/build-citus, cached) and
# the extension, installs both into the PostgreSQL that PG_CONFIG names
# (Debian's 15 by default); citus_start then starts a coordinator and two
# workers in a temporary directory, as the unprivileged server user,
# each with shared_preload_libraries = 'citus,inbox'; citus_join adds the
# workers (their metadata synced: each can route queries, MX);
# citus_setup_sql and citus_doc_sql give the SQL blocks of docs/citus.md's
# "Setting up" and of the whole page, so that the cluster is
# set up, and checked, exactly as users are told to.  Everything
# started is stopped by pid on exit or interrupt.
#
# Environment: PG_CONFIG, what scripts/build-citus reads, INBOX_CITUS_KEEP=1
# to keep the cluster's logs (they are kept anyway when the caller sets
# status to 1), CITUS_FSYNC.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

started=$(date +%s)
# Citus before the extension: its build takes minutes the first time, and
# the extension is then installed right before the servers start (see
# below).
ensure_packages
say "==> Citus"
PG_CONFIG=$PG_CONFIG "$TOP/scripts/build-citus" >/dev/null || die "could not build or install Citus (see above)"
build_and_install

# Other work on this machine may install another build of the extension
# into the same PostgreSQL; the servers must load this one.  Checked
# before they start and once they all have (each loaded it at its start).
library=$("$PG_CONFIG" --pkglibdir)/inbox.so
ours_installed() { cmp -s "$TOP/inbox.so" "$library"; }
ours_installed || die "$library is not the library just built from $TOP"

user=$(server_user)
workdir=$(mktemp -d "${TMPDIR:-/tmp}/inbox-citus.XXXXXX")
chmod 755 "$workdir"
is_root && chown "$user" "$workdir"

NODES="coordinator worker1 worker2"
declare -A port pid hpid
background=()
status=0

# kill_tree PID: stop a process and its descendants (a background
# session is a subshell, runuser, then psql or pgbench), by pid.
kill_tree() {
	local child
	for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		kill_tree "$child"
	done
	kill "$1" 2>/dev/null
}

# cleanup: stop what this script started, by pid: background sessions
# first, then the servers (fast shutdown: SIGINT to the postmaster).  The
# logs stay when anything failed.
cleanup() {
	local rc=$1 p n i
	trap - EXIT INT TERM
	[ "$rc" -eq 0 ] || status=1
	for p in "${background[@]}"; do
		kill_tree "$p"
	done
	for n in $NODES; do
		p=${pid[$n]:-}
		[ -n "$p" ] || continue
		kill -INT "$p" 2>/dev/null
	done
	for n in $NODES; do
		p=${pid[$n]:-}
		[ -n "$p" ] || continue
		i=0
		while kill -0 "$p" 2>/dev/null && [ "$i" -lt 600 ]; do
			sleep 0.1
			i=$((i + 1))
		done
		# Still there after a minute: immediate shutdown.
		kill -0 "$p" 2>/dev/null && kill -QUIT "$p" 2>/dev/null
	done
	for n in $NODES; do
		rm -rf "${workdir:?}/$n"
	done
	if [ "$status" -eq 0 ] && [ "${INBOX_CITUS_KEEP:-0}" != 1 ]; then
		rm -rf "$workdir"
	else
		say "logs kept in $workdir" >&"$terminal"
	fi
}
# The terminal, for cleanup's last word: an interrupt can arrive while a
# check's output goes to its log.
exec {terminal}>&1
trap 'cleanup $?' EXIT
trap 'exit 130' INT TERM

# free_port: a TCP port on loopback that nothing listens on.
free_port() {
	local p
	for ((p = 20000 + RANDOM % 20000; ; p++)); do
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		case " ${port[*]} " in *" $p "*) continue ;; esac
		echo "$p"
		return
	done
}

# q NODE [PSQL ARGS...]: psql on a node, as the superuser, unaligned and
# tuples only; standard input and -c as psql takes them.
q() {
	local node=$1
	shift
	as_server_user psql -X -q -A -t -h 127.0.0.1 -p "${port[$node]}" \
		-U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}

# wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds; false
# if it has not within SECONDS.
wait_until() {
	local deadline=$(($(date +%s) + $1))
	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# citus_start: initdb and start the three servers, each with Citus and
# the extension preloaded.  CITUS_FSYNC (default off: the data is thrown
# away) is the servers' fsync.
citus_start() {
local n started_ok
for n in $NODES; do
	port[$n]=$(free_port)
	as_server_user initdb -D "$workdir/$n" -A trust -U postgres --no-sync >"$workdir/$n-initdb.log" 2>&1 ||
		die "initdb of the $n failed: $workdir/$n-initdb.log"
	# Loopback only.  The worker's naptime short, so that check g sees a
	# pass; fsync off: the data is thrown away.
	cat >>"$workdir/$n/postgresql.conf" <<-EOF
		port = ${port[$n]}
		listen_addresses = '127.0.0.1'
		unix_socket_directories = '$workdir'
		shared_preload_libraries = 'citus,inbox'
		max_prepared_transactions = 20
		fsync = ${CITUS_FSYNC:-off}
		inbox.naptime = 1
	EOF
	started_ok=0
	as_server_user pg_ctl -D "$workdir/$n" -l "$workdir/$n.log" -w start >/dev/null && started_ok=1
	# Its pid even when it did not come up in time: it is stopped on exit.
	[ -f "$workdir/$n/postmaster.pid" ] && pid[$n]=$(head -n 1 "$workdir/$n/postmaster.pid")
	[ "$started_ok" = 1 ] || die "the $n did not start: $workdir/$n.log"
done
ours_installed || die "$library was replaced while the servers started (another build installed its own); run again"
say "==> cluster: coordinator on port ${port[coordinator]}, workers on ${port[worker1]} and ${port[worker2]} ($workdir)"
}

# session_open NAME NODE: a psql session on a node that stays open, fed
# through a fifo (session_send), its answers in $workdir/NAME.out.
declare -A spid sfd
session_open() {
	local fd
	mkfifo "$workdir/$1.in"
	as_server_user psql -X -q -A -t -h 127.0.0.1 -p "${port[$2]}" -U postgres -d postgres \
		<"$workdir/$1.in" >"$workdir/$1.out" 2>&1 &
	spid[$1]=$!
	background+=("$!")
	exec {fd}>"$workdir/$1.in"
	sfd[$1]=$fd
}
session_send() { printf '%s\n' "$2" >&"${sfd[$1]}"; }
# session_answered NAME N: has the session printed N lines?
session_answered() { [ "$(wc -l <"$workdir/$1.out")" -ge "$2" ]; }
session_line() { sed -n "${2}p" "$workdir/$1.out"; }
session_close() {
	local fd=${sfd[$1]}
	exec {fd}>&-
	wait "${spid[$1]}"
}


# citus_join: Citus on every node, the coordinator registered, the
# workers added.
citus_join() {
	local n
	for n in $NODES; do
		q "$n" -c "CREATE EXTENSION citus" || return 1
	done
	q coordinator <<-EOF
		SELECT citus_set_coordinator_host('127.0.0.1', ${port[coordinator]});
		SELECT citus_add_node('127.0.0.1', ${port[worker1]});
		SELECT citus_add_node('127.0.0.1', ${port[worker2]});
	EOF
}

# doc_sql FILE SECTION FIRST [LAST]: the sql blocks FIRST to LAST (from 1;
# LAST defaults to FIRST) of FILE, under its heading "## SECTION" (the
# whole file when SECTION is empty), each block's text as it is (a block
# indented in a list loses its indentation).
doc_sql() {
	awk -v section="$2" -v first="$3" -v last="${4:-$3}" '
		BEGIN { inside = (section == "") }
		section != "" && /^## / { inside = ($0 == "## " section) }
		inside && /^ *```sql$/ { block++; keep = (block >= first && block <= last); next }
		inside && /^ *```$/ { keep = 0; next }
		keep { sub(/^  /, ""); print }' "$1"
}
# citus_setup_sql FIRST [LAST]: docs/citus.md's "Setting up" blocks.
citus_setup_sql() { doc_sql "$TOP/docs/citus.md" "Setting up" "$@"; }
# citus_doc_sql FIRST [LAST]: docs/citus.md's blocks, "Setting up"'s two first.
citus_doc_sql() { doc_sql "$TOP/docs/citus.md" "" "$@"; }
