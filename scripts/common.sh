# scripts/common.sh: set-up shared by "make demo" and "make test".
#
# Installs what is missing (as root, with apt-get; otherwise it prints the
# exact command), builds and installs the extension, and picks the
# unprivileged user that runs PostgreSQL servers: PostgreSQL refuses to run
# as root.  Sourced, not run.

# PG_CONFIG may name any installation of a supported major (15 to 18): a
# PGDG or Homebrew one, a private copy, one scripts/build-pg built.  Then
# nothing is installed with apt-get; it only checks what the tests need.
PG_MAJOR=15
PG_CONFIG_GIVEN=${PG_CONFIG:+yes}
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PG_MAJOR/bin/pg_config}
PG_BIN=$(dirname "$PG_CONFIG")
PACKAGES="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libipc-run-perl"

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

say() { printf '%s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# ensure_packages: install the Debian packages the build and tests need;
# with a PG_CONFIG given, check that it runs and that IPC::Run is there.
ensure_packages() {
	local missing="" p
	if [ -n "$PG_CONFIG_GIVEN" ]; then
		"$PG_CONFIG" --version >/dev/null 2>&1 || die "PG_CONFIG=$PG_CONFIG does not run"
		perl -MIPC::Run -e 1 2>/dev/null ||
			die "the TAP tests need Perl's IPC::Run (Debian: libipc-run-perl; CPAN: IPC::Run)"
		return 0
	fi
	for p in $PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	if ! is_root; then
		die "missing Debian packages:$missing
run as root:  apt-get update && apt-get install -y$missing"
	fi
	say "==> installing$missing"
	apt-get update -q >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing >/dev/null
}

# build_and_install: compile and install the extension into the
# PostgreSQL that PG_CONFIG names.
build_and_install() {
	# PGXS rebuilds nothing when only PG_CONFIG changed: object files of
	# another major would be linked in.  Start clean when it changes.
	local stamp=$TOP/.pg_config_used
	if [ "$(cat "$stamp" 2>/dev/null)" != "$PG_CONFIG" ]; then
		make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" clean >/dev/null 2>&1 || true
		echo "$PG_CONFIG" >"$stamp" 2>/dev/null || true
	fi
	say "==> building"
	# INBOX_SHOW_BUILD=1 (make test-all) shows every compiler command;
	# otherwise only warnings and errors are shown.  Not left to the
	# caller's set -e, which not every caller sets.
	if [ "${INBOX_SHOW_BUILD:-0}" = 1 ]; then
		make -C "$TOP" PG_CONFIG="$PG_CONFIG" || die "the build failed"
	else
		make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" >/dev/null || die "the build failed"
	fi
	# Say where, before, and never over a package's files.
	local libdir sharedir owner
	libdir=$("$PG_CONFIG" --pkglibdir)
	sharedir=$("$PG_CONFIG" --sharedir)/extension
	owner=$(dpkg-query -S "$libdir/inbox.so" 2>/dev/null | cut -d: -f1 || true)
	if [ -n "$owner" ] && [ "${INBOX_INSTALL_OVER_PACKAGE:-0}" != 1 ]; then
		die "$libdir/inbox.so belongs to the package $owner: installing would
overwrite its files (dpkg --verify would flag them).  Test against a private
copy instead:  make test PG_CONFIG=\$(scripts/private-pg)
(or remove the package, or set INBOX_INSTALL_OVER_PACKAGE=1)"
	fi
	say "==> installing inbox into the PostgreSQL $PG_CONFIG names:"
	say "    $libdir/inbox.so and $sharedir/inbox*"
	case $libdir in
	/usr/lib/postgresql/*)
		say "    (the system's: every server of it can then load this build; a private"
		say "    copy instead: PG_CONFIG=\$(scripts/private-pg), see CONTRIBUTING.md)" ;;
	esac
	if ! make -C "$TOP" -s PG_CONFIG="$PG_CONFIG" install >/dev/null; then
		die "could not install; run:  sudo make -C '$TOP' PG_CONFIG=$PG_CONFIG install"
	fi
}

# server_user: the unprivileged user that runs servers and tests.
server_user() {
	if is_root; then
		id postgres >/dev/null 2>&1 || die "no 'postgres' user (it comes with the postgresql-$PG_MAJOR package)"
		echo postgres
	else
		id -un
	fi
}

# as_server_user CMD...: run a command as that user, keeping PATH.  From
# /, since that user may not be allowed into the current directory (a
# checkout in a private home directory): pass absolute paths.
as_server_user() {
	if is_root; then
		(cd / && runuser -u "$(server_user)" -- env PATH="$PG_BIN:$PATH" "$@")
	else
		env PATH="$PG_BIN:$PATH" "$@"
	fi
}

# start_server NAME [SETTING...]: start a throwaway server under .run/NAME
# (or a temp dir if the server user cannot reach the checkout), as the
# server user, on a private socket with no TCP, the library preloaded.
# Sets RUNDIR; the server is stopped and its data removed on exit.
start_server() {
	local name=$1 user setting
	shift
	user=$(server_user)
	RUNDIR=$TOP/.run/$name
	RUNDIR_TEMP=""
	mkdir -p "$RUNDIR" 2>/dev/null || true
	is_root && chown "$user" "$RUNDIR" 2>/dev/null || true
	if ! as_server_user test -w "$RUNDIR"; then
		RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/inbox-$name.XXXXXX")
		RUNDIR_TEMP=$RUNDIR
		is_root && chown "$user" "$RUNDIR"
	fi
	trap stop_server EXIT

	say "==> starting a throwaway server in $RUNDIR"
	rm -rf "$RUNDIR/data" "$RUNDIR/server.log"
	as_server_user initdb -D "$RUNDIR/data" -A trust -U postgres >/dev/null
	{
		echo "shared_preload_libraries = 'inbox'"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$RUNDIR'"
		for setting in "$@"; do echo "$setting"; done
	} >>"$RUNDIR/data/postgresql.conf"
	as_server_user pg_ctl -D "$RUNDIR/data" -l "$RUNDIR/server.log" -w start >/dev/null
}

# stop_server [keep]: stop the server start_server started and remove its
# data; and its directory, if it was made in TMPDIR, unless "keep" (the
# caller shows its log).
stop_server() {
	as_server_user pg_ctl -D "$RUNDIR/data" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$RUNDIR/data"
	if [ -n "${RUNDIR_TEMP:-}" ] && [ "${1:-}" != keep ]; then
		rm -rf "$RUNDIR_TEMP"
	fi
}

# server_psql ARGS...: psql as the superuser of the throwaway server.
server_psql() {
	as_server_user psql -X -q -h "$RUNDIR" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}

# prepare: everything both commands need before they start a server.
prepare() {
	ensure_packages
	build_and_install
}
