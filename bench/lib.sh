# bench/lib.sh: what the benchmark runners share.
#
# scripts/common.sh (build, install, a throwaway server), and on top of it
# the machine's CPU counters, medians, and the header every report starts
# with: the commit, the server's version(), the settings that matter and
# the CPU time the hypervisor stole.  Sourced, not run.

source "$(dirname "${BASH_SOURCE[0]}")/../scripts/common.sh"

# The settings a report names: those that change what the runners measure.
BENCH_SETTINGS="shared_buffers max_wal_size synchronous_commit full_page_writes wal_compression
fsync autovacuum inbox.batch_size inbox.batch_delay inbox.naptime"

# cpu_counters: the machine's CPU time so far (/proc/stat, in ticks): all
# of it, the part the hypervisor ran other guests in ("steal"), and the
# part no process used (idle and iowait).
cpu_counters() {
	awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9, $5 + $6; exit }' /proc/stat
}

# stolen_since TOTAL STOLEN [IDLE]: the percent of the CPU time since
# cpu_counters printed TOTAL STOLEN IDLE that was stolen.  On a shared
# virtual machine a run with much stolen time is slower and has longer
# tails for reasons that have nothing to do with what it measures.
stolen_since() {
	cpu_counters | awk -v t="$1" -v s="$2" \
		'{ printf "%.0f", ($1 > t) ? ($2 - s) * 100 / ($1 - t) : 0 }'
}

# busy_since TOTAL STOLEN IDLE: the percent of the CPU time since
# cpu_counters printed TOTAL STOLEN IDLE that processes of this machine
# used (neither idle nor stolen): 100 is every core busy all along.
busy_since() {
	cpu_counters | awk -v t="$1" -v s="$2" -v i="$3" \
		'{ printf "%.0f", ($1 > t) ? 100 - ($2 - s + $3 - i) * 100 / ($1 - t) : 0 }'
}

# stolen_summary PERCENT...: the median and highest share of the CPU time
# stolen during each measurement of a report (stolen_since).
stolen_summary() {
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
		if (NR) printf "per measurement median %d %%, highest %d %%", v[int((NR + 1) / 2)], v[NR] }'
}

# median: the median of the numbers on standard input, one per line (the
# mean of the middle two when there is an even number of them).
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# describe_commit: git describe --always --dirty of the checkout; when it
# is dirty, whether anything but earlier reports in bench/results differs.
describe_commit() {
	local d others
	d=$(git -C "$TOP" describe --always --dirty 2>/dev/null) || { echo "not a git checkout"; return 0; }
	case $d in
	*-dirty)
		others=$(git -C "$TOP" status --porcelain --untracked-files=no -- . ':(exclude)bench/results' | wc -l)
		if [ "$others" -eq 0 ]; then d="$d (only bench/results differs)"; else d="$d (files changed: $others)"; fi
		;;
	esac
	echo "$d"
}

# bench_begin: the commit being measured and the CPU counters, taken before
# the run builds anything or writes a report.
bench_begin() {
	BENCH_COMMIT=$(describe_commit)
	BENCH_CPU=$(cpu_counters)
}

# server_settings: BENCH_SETTINGS as the throwaway server has them.
server_settings() {
	server_psql -At -c "SELECT string_agg(format('%s = %s', name, coalesce(current_setting(name, true), '(none)')), ', ' ORDER BY n)
FROM unnest(string_to_array('$(echo $BENCH_SETTINGS)', ' ')) WITH ORDINALITY AS s(name, n)"
}

# report_header TITLE COMMAND [STOLEN...]: the lines every report starts
# with; COMMAND is how to run it again, STOLEN the steal of each of its
# measurements.  The version and settings come from the throwaway server,
# or from BENCH_VERSION and BENCH_SERVER_SETTINGS when a runner has none.
report_header() {
	local title=$1 command=$2
	shift 2
	echo "# $title"
	echo
	echo "- commit: \`$BENCH_COMMIT\` (git describe --always --dirty), measured $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- server: ${BENCH_VERSION:-$(server_psql -At -c 'SELECT version()')}"
	echo "- settings: ${BENCH_SERVER_SETTINGS:-$(server_settings)}"
	echo "- machine: $(nproc) cores; CPU time stolen by the hypervisor (steal, /proc/stat): $(stolen_since $BENCH_CPU) % of the whole run$([ $# -gt 0 ] && echo ", $(stolen_summary "$@")")"
	echo "- command: \`$command\`"
	echo
}
