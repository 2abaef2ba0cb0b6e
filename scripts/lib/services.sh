# shellcheck shell=bash disable=SC2016
# (SC2016: the single-quoted bash -c scripts expand their own arguments.)
# Functions that reuse or start the servers the tests need (docs/development.md):
# Redis 7 as the Valkey server, a private three-master Redis Cluster as the
# Valkey Cluster, PostgreSQL, and the Versity S3 gateway.
# Sourced by scripts/test, which must set TMP (a private temp dir) first and call
# services_stop from an EXIT trap.
#
# Each start_* function exports the variables internal/testenv reads. A variable
# already set in the environment is used as it is and nothing is started for it.

VGW_MODULE=github.com/versity/versitygw
VGW_VERSION=v1.8.0
S3_TEST_BUCKET=pyrula-test

REDIS_PID=""
CLUSTER_PIDS=()
PG_DATA=""
PG_RUN=()
PG_BINDIR=""
VGW_PID=""
APT_UPDATED=0

log() { printf '==> %s\n' "$*"; }
warn() { printf '==> warning: %s\n' "$*" >&2; }

# die MESSAGE [LOGFILE]: print MESSAGE and the tail of LOGFILE, then exit 1.
die() {
	printf '==> error: %s\n' "$1" >&2
	if [[ -n ${2:-} && -s ${2:-} ]]; then
		printf -- '--- last lines of %s:\n' "$2" >&2
		tail -n 40 "$2" | sed 's/^/    /' >&2
		printf -- '---\n' >&2
	fi
	exit 1
}

now_ms() { date +%s%3N; }

# alive PID: the process exists and is not a zombie.
alive() {
	local state
	state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[[ -n $state && $state != Z ]]
}

# stop_pid PID NAME: SIGTERM, wait up to 10 s, then SIGKILL.
stop_pid() {
	log "stopping $2 (pid $1)"
	kill "$1" 2>/dev/null || return 0
	wait_until 10 eval '! alive '"$1" || kill -9 "$1" 2>/dev/null || true
}

reuse_allowed() { [[ ${PYRULA_TEST_REUSE:-1} != 0 ]]; }

# wait_until SECONDS COMMAND...: poll COMMAND every 0.1 s until it succeeds.
wait_until() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0"' "$1" 2>/dev/null
}

# free_port FIRST: the first port from FIRST on where nothing listens on 127.0.0.1.
free_port() {
	local p=$1 i
	for ((i = 0; i < 200; i++, p++)); do
		if ! port_open "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free port in $1..$p on 127.0.0.1"
}

# as_root COMMAND...: run COMMAND as root (directly, or with password-less sudo).
as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		return 1
	fi
}

# apt_install PACKAGE...: install Debian packages without starting their services.
apt_install() {
	local log_file=$TMP/apt.log policy=/usr/sbin/policy-rc.d made_policy=0 rc=0
	if ! as_root true; then
		die "need $* but cannot install it: not root and no password-less sudo (install it with: apt-get install $*)"
	fi
	if [[ $APT_UPDATED == 0 ]]; then
		log "apt-get update"
		as_root apt-get -o DPkg::Lock::Timeout=300 update >>"$log_file" 2>&1 || die "apt-get update failed" "$log_file"
		APT_UPDATED=1
	fi
	log "apt-get install $*"
	# A policy-rc.d that exits 101 keeps the packages' own services from being
	# started: this script starts private ones and stops them at the end.
	if [[ ! -e $policy ]]; then
		as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy" && made_policy=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
		--no-install-recommends "$@" >>"$log_file" 2>&1 || rc=$?
	if [[ $made_policy == 1 ]]; then
		as_root rm -f "$policy"
	fi
	[[ $rc == 0 ]] || die "apt-get install $* failed" "$log_file"
}

# ensure_cgo: go test -race needs cgo and so a C compiler.
ensure_cgo() {
	local cc
	cc=$(go env CC)
	if ! command -v "${cc%% *}" >/dev/null; then
		apt_install gcc libc6-dev
	fi
	if [[ $(go env CGO_ENABLED) != 1 ]]; then
		export CGO_ENABLED=1
	fi
}

# ensure_zstd: the reference zstd tool, which a bundle test has decompress
# the blobs this project writes.
ensure_zstd() {
	command -v zstd >/dev/null || apt_install zstd
}

# ensure_chromium: Debian's chromium, the headless browser the HTML report
# tests open their pages in (internal/testbrowser).
ensure_chromium() {
	command -v chromium >/dev/null || apt_install chromium
}

# ---------------------------------------------------------------- Redis / Valkey

# redis_line PORT COMMAND: send an inline command, print the first reply line.
redis_line() {
	timeout 2 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "%s\r\n" "$1" >&3
		IFS= read -r line <&3 || exit 1
		printf "%s\n" "${line%$'"'\r'"'}"
	' "$1" "$2" 2>/dev/null
}

redis_ping() { [[ $(redis_line "$1" PING) == "+PONG" ]]; }

# redis_up PORT PIDFILE: our redis answers and has written its pid file.
redis_up() { redis_ping "$1" && [[ -s $2 ]]; }

# redis_version PORT: the redis_version field of INFO server.
redis_version() {
	timeout 2 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "INFO server\r\n" >&3
		while IFS= read -r line <&3; do
			case $line in redis_version:*) v=${line#redis_version:}; printf "%s\n" "${v%$'"'\r'"'}"; exit 0 ;; esac
		done
		exit 1
	' "$1" 2>/dev/null
}

start_valkey() {
	if [[ -n ${PYRULA_TEST_VALKEY_URL:-} ]]; then
		log "valkey: $PYRULA_TEST_VALKEY_URL (from the environment)"
		return
	fi
	local port=${PYRULA_TEST_REDIS_PORT:-6379} version dir=$TMP/redis log_file=$TMP/redis.log
	if reuse_allowed && redis_ping "$port"; then
		version=$(redis_version "$port" || true)
		if [[ ${version%%.*} =~ ^[0-9]+$ ]] && ((${version%%.*} >= 7)); then
			export PYRULA_TEST_VALKEY_URL="redis://127.0.0.1:$port/0"
			log "redis $version on 127.0.0.1:$port (reused)"
			return
		fi
		warn "the server on 127.0.0.1:$port reports redis_version '${version}', not 7 or later: starting a private one"
	fi
	command -v redis-server >/dev/null || apt_install redis-server
	mkdir -p "$dir"
	for _ in 1 2 3 4 5; do
		port=$(free_port "$port")
		redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
			--dir "$dir" --logfile "$log_file" --pidfile "$dir/redis.pid" </dev/null >>"$dir/redis.out" 2>&1 || true
		if wait_until 10 redis_up "$port" "$dir/redis.pid"; then
			REDIS_PID=$(<"$dir/redis.pid")
			export PYRULA_TEST_VALKEY_URL="redis://127.0.0.1:$port/0"
			log "redis $(redis_version "$port" || true) on 127.0.0.1:$port (started, pid $REDIS_PID)"
			return
		fi
		if ! port_open "$port"; then
			cat "$dir/redis.out" >>"$log_file" 2>/dev/null
			die "redis-server did not start on 127.0.0.1:$port" "$log_file"
		fi
		port=$((port + 1)) # someone else took the port meanwhile
	done
	die "redis-server: no port could be had" "$log_file"
}

stop_valkey() {
	[[ -n $REDIS_PID ]] || return 0
	stop_pid "$REDIS_PID" redis
	REDIS_PID=""
}

# ---------------------------------------------------------------- Redis Cluster (Valkey Cluster)

# ports_free PORT: nothing listens on 127.0.0.1:PORT nor on its cluster bus
# port, PORT+10000.
ports_free() { ! port_open "$1" && ! port_open $(($1 + 10000)); }

# free_cluster_port FIRST: the first port from FIRST on that ports_free.
free_cluster_port() {
	local p=$1 i
	for ((i = 0; i < 200; i++, p++)); do
		if ports_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	die "no free port pair (port and port+10000) in $1..$p on 127.0.0.1"
}

# cluster_ok PORT...: every node answers CLUSTER INFO with cluster_state:ok.
cluster_ok() {
	local p
	for p in "$@"; do
		timeout 2 redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

# start_cluster_node PORT DIR: start one cluster-enabled redis-server on
# 127.0.0.1:PORT with its files in DIR; print its pid once it answers.
start_cluster_node() {
	local port=$1 dir=$2
	mkdir -p "$dir"
	redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
		--cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 5000 \
		--cluster-announce-ip 127.0.0.1 \
		--dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" </dev/null >>"$dir/redis.out" 2>&1 || true
	wait_until 10 redis_up "$port" "$dir/redis.pid" || return 1
	cat "$dir/redis.pid"
}

# start_valkey_cluster: a private three-master Redis Cluster on loopback
# (no replicas), started every run from PYRULA_TEST_CLUSTER_PORT (default
# 7001) up; exports PYRULA_TEST_VALKEY_CLUSTER_URL with every master, in the
# form valkey-go's ParseURL reads (redis://HOST:PORT?addr=HOST:PORT&addr=…).
start_valkey_cluster() {
	if [[ -n ${PYRULA_TEST_VALKEY_CLUSTER_URL:-} ]]; then
		log "valkey cluster: $PYRULA_TEST_VALKEY_CLUSTER_URL (from the environment)"
		return
	fi
	local port=${PYRULA_TEST_CLUSTER_PORT:-7001} root=$TMP/cluster started pid i attempt
	local ports=() addrs=() log_file=$TMP/cluster.log
	started=$(now_ms)
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		apt_install redis-server redis-tools
	fi
	mkdir -p "$root"
	for i in 1 2 3; do
		for attempt in 1 2 3 4 5; do
			port=$(free_cluster_port "$port")
			if pid=$(start_cluster_node "$port" "$root/$port"); then
				CLUSTER_PIDS+=("$pid")
				ports+=("$port")
				addrs+=("127.0.0.1:$port")
				port=$((port + 1))
				break
			fi
			cat "$root/$port/redis.out" "$root/$port/redis.log" >>"$log_file" 2>/dev/null
			if [[ -s $root/$port/redis.pid ]]; then # started but never answered
				stop_pid "$(<"$root/$port/redis.pid")" "redis cluster node" >>"$log_file"
			fi
			port_open "$port" || die "cluster node $i did not start on 127.0.0.1:$port" "$log_file"
			port=$((port + 1)) # someone else took the port meanwhile
			((attempt < 5)) || die "cluster node $i: no port could be had" "$log_file"
		done
	done
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >>"$log_file" 2>&1 ||
		die "redis-cli --cluster create ${addrs[*]} failed" "$log_file"
	wait_until 30 cluster_ok "${ports[@]}" || die "the cluster on ${addrs[*]} did not reach cluster_state:ok" "$log_file"
	export PYRULA_TEST_VALKEY_CLUSTER_URL="redis://${addrs[0]}?addr=${addrs[1]}&addr=${addrs[2]}"
	log "redis cluster $(redis_version "${ports[0]}" || true), three masters on ${addrs[*]} (started, pids ${CLUSTER_PIDS[*]}) in $(($(now_ms) - started)) ms"
}

stop_valkey_cluster() {
	local pid
	for pid in "${CLUSTER_PIDS[@]}"; do
		stop_pid "$pid" "redis cluster node"
	done
	CLUSTER_PIDS=()
}

# ---------------------------------------------------------------- PostgreSQL

pg_bindir() {
	local d
	d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	if [[ -n $d && -x $d/initdb && -x $d/pg_ctl ]]; then
		echo "$d"
	elif command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		dirname "$(command -v initdb)"
	else
		return 1
	fi
}

# pg_login PORT USER: trust login to database test works.
pg_login() {
	[[ $(PGCONNECT_TIMEOUT=3 psql -X -A -t -q -w \
		-d "postgres://$2@127.0.0.1:$1/test?sslmode=disable" -c 'select 1' 2>/dev/null) == 1 ]]
}

start_postgres() {
	if [[ -n ${PYRULA_TEST_POSTGRES_DSN:-} ]]; then
		log "postgres: $PYRULA_TEST_POSTGRES_DSN (from the environment)"
		return
	fi
	local port=${PYRULA_TEST_POSTGRES_PORT:-5432} user bindir dir=$TMP/pg opts log_file
	command -v psql >/dev/null || apt_install postgresql
	if reuse_allowed && port_open "$port"; then
		for user in ${PYRULA_TEST_POSTGRES_USER:-} postgres "$(id -un)"; do
			if pg_login "$port" "$user"; then
				export PYRULA_TEST_POSTGRES_DSN="postgres://$user@127.0.0.1:$port/test?sslmode=disable"
				log "postgres $(psql -X -A -t -q -w -d "$PYRULA_TEST_POSTGRES_DSN" -c 'show server_version' 2>/dev/null | cut -d' ' -f1) on 127.0.0.1:$port as $user (reused)"
				return
			fi
		done
		warn "a server answers on 127.0.0.1:$port but trust login to database test fails: starting a private cluster"
	fi
	bindir=$(pg_bindir) || {
		apt_install postgresql
		bindir=$(pg_bindir) || die "initdb and pg_ctl not found after installing postgresql"
	}

	# initdb refuses to run as root: run the cluster as the postgres user.
	mkdir -p "$dir"
	if [[ $EUID -eq 0 ]]; then
		if ! id postgres >/dev/null 2>&1; then
			log "creating the postgres OS user"
			useradd --system --user-group --no-create-home --home-dir /var/lib/postgresql \
				--shell /bin/bash postgres
		fi
		chmod 711 "$TMP"
		chown postgres: "$dir"
		if command -v runuser >/dev/null; then
			PG_RUN=(runuser -u postgres --)
		else
			PG_RUN=(su postgres -s /bin/sh -c '"$0" "$@"')
		fi
	fi
	log_file=$dir/postgres.log
	(cd "$dir" && "${PG_RUN[@]}" "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 \
		--no-locale --no-sync) >"$TMP/initdb.log" 2>&1 || die "initdb failed" "$TMP/initdb.log"
	PG_DATA=$dir/data
	PG_BINDIR=$bindir
	for _ in 1 2 3 4 5; do
		port=$(free_port "$port")
		# A throw-away cluster: no durability, sockets in the temp dir.
		opts="-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir"
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
		if (cd "$dir" && "${PG_RUN[@]}" "$bindir/pg_ctl" -D "$PG_DATA" -l "$log_file" -w -t 60 -o "$opts" start) \
			</dev/null >>"$TMP/pg_ctl.log" 2>&1; then
			PGCONNECT_TIMEOUT=5 psql -X -q -w -h 127.0.0.1 -p "$port" -U postgres -d postgres \
				-c 'CREATE DATABASE test' >>"$TMP/pg_ctl.log" 2>&1 || die "CREATE DATABASE test failed" "$TMP/pg_ctl.log"
			export PYRULA_TEST_POSTGRES_DSN="postgres://postgres@127.0.0.1:$port/test?sslmode=disable"
			log "postgres $("$bindir/postgres" --version | awk '{print $3}') on 127.0.0.1:$port as postgres (started, data in $PG_DATA)"
			return
		fi
		port_open "$port" || die "postgres did not start on 127.0.0.1:$port" "$log_file"
		port=$((port + 1))
	done
	die "postgres: no port could be had" "$log_file"
}

stop_postgres() {
	[[ -n $PG_DATA ]] || return 0
	log "stopping postgres"
	(cd "$TMP" && "${PG_RUN[@]}" "$PG_BINDIR/pg_ctl" -D "$PG_DATA" -m fast -w -t 30 stop) \
		</dev/null >>"$TMP/pg_ctl.log" 2>&1 || warn "pg_ctl stop failed (see $TMP/pg_ctl.log)"
	PG_DATA=""
}

# ---------------------------------------------------------------- Versity S3 gateway

# ensure_versitygw: print the path of versitygw $VGW_VERSION, building it into
# the cache the first time.
ensure_versitygw() {
	local cache=${PYRULA_TEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/pyrula-test}
	local bindir=$cache/versitygw-$VGW_VERSION bin log_file=$TMP/versitygw-build.log start
	bin=$bindir/versitygw
	if [[ -x $bin ]] && go version -m "$bin" 2>/dev/null |
		grep -Eq "^[[:space:]]+mod[[:space:]]+${VGW_MODULE}[[:space:]]+${VGW_VERSION}([[:space:]]|\$)"; then
		echo "$bin"
		return
	fi
	mkdir -p "$bindir"
	log "building versitygw $VGW_VERSION into $bindir (once per machine; a few minutes)" >&2
	start=$(now_ms)
	# go install pkg@version ignores this module; run it from / to make that plain.
	(cd / && GOBIN=$bindir GOFLAGS=-buildvcs=false flock "$bindir.lock" \
		go install "$VGW_MODULE/cmd/versitygw@$VGW_VERSION") >"$log_file" 2>&1 ||
		die "go install $VGW_MODULE/cmd/versitygw@$VGW_VERSION failed" "$log_file"
	log "built versitygw in $(($(now_ms) - start)) ms" >&2
	echo "$bin"
}

# http_ok PORT PATH: GET http://127.0.0.1:PORT/PATH answers 200.
http_ok() {
	local status
	status=$(timeout 2 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%s\r\n\r\n" "$1" "$0" >&3
		IFS= read -r line <&3 && printf "%s\n" "$line"
	' "$1" "$2" 2>/dev/null) || return 1
	[[ $status =~ ^HTTP/1\.[01]\ 200 ]]
}

# vgw_up_or_dead PORT: the gateway answers its health check, or it has exited
# (then waiting longer is pointless).
vgw_up_or_dead() { http_ok "$1" /health || ! alive "$VGW_PID"; }

start_s3() {
	if [[ -n ${PYRULA_TEST_S3_ENDPOINT:-} ]]; then
		[[ -n ${AWS_ACCESS_KEY_ID:-} && -n ${AWS_SECRET_ACCESS_KEY:-} ]] ||
			die "PYRULA_TEST_S3_ENDPOINT is set but AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not"
		export PYRULA_TEST_S3_REGION=${PYRULA_TEST_S3_REGION:-us-east-1}
		log "s3: $PYRULA_TEST_S3_ENDPOINT (from the environment)"
		return
	fi
	local bin port=${PYRULA_TEST_S3_PORT:-7070} root=$TMP/s3 log_file=$TMP/versitygw.log
	local access=pyrulatest secret=pyrulatestsecret region=us-east-1
	bin=$(ensure_versitygw)
	mkdir -p "$root"
	for _ in 1 2 3 4 5; do
		port=$(free_port "$port")
		ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret \
			"$bin" --port "127.0.0.1:$port" --region "$region" --health /health --quiet \
			posix "$root" </dev/null >>"$log_file" 2>&1 &
		VGW_PID=$!
		if wait_until 20 vgw_up_or_dead "$port" && alive "$VGW_PID"; then
			# A signed request through the gateway's admin API: proves the
			# credentials work, and leaves a bucket for tests that want one.
			"$bin" admin --access "$access" --secret "$secret" --region "$region" \
				--endpoint-url "http://127.0.0.1:$port" create-bucket --owner "$access" \
				--bucket "$S3_TEST_BUCKET" >>"$log_file" 2>&1 ||
				die "versitygw answers on 127.0.0.1:$port but creating bucket $S3_TEST_BUCKET failed" "$log_file"
			export PYRULA_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
			export PYRULA_TEST_S3_REGION=$region
			export PYRULA_TEST_S3_BUCKET=$S3_TEST_BUCKET
			# The posix backend keeps each object as a file <root>/<bucket>/<key>:
			# store tests corrupt stored bytes there directly.
			export PYRULA_TEST_S3_POSIX_ROOT=$root
			export AWS_ACCESS_KEY_ID=$access AWS_SECRET_ACCESS_KEY=$secret
			log "versitygw $VGW_VERSION on 127.0.0.1:$port, posix root $root (started, pid $VGW_PID)"
			return
		fi
		stop_s3 >/dev/null
		port_open "$port" || die "versitygw did not start on 127.0.0.1:$port" "$log_file"
		port=$((port + 1))
	done
	die "versitygw: no port could be had" "$log_file"
}

stop_s3() {
	[[ -n $VGW_PID ]] || return 0
	stop_pid "$VGW_PID" versitygw
	wait "$VGW_PID" 2>/dev/null || true
	VGW_PID=""
}

# services_stop: stop whatever this script started (safe to call twice).
services_stop() {
	stop_s3
	stop_postgres
	stop_valkey_cluster
	stop_valkey
}
