# Helpers of .ci/run, sourced by it and by its test (tools/ci).

# quietly WHAT COMMAND...: runs COMMAND with its output set aside, so a
# passing install step stays quiet; when it fails, prints what failed, the
# command, its exit status and everything it printed, then returns that
# status (under set -e the script stops there, saying why).
quietly() {
  local what=$1
  shift
  local log status=0
  log=$(mktemp)
  "$@" >"$log" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    echo ".ci/run: $what failed (exit status $status): $*" >&2
    sed 's/^/    /' "$log" >&2
  fi
  rm -f "$log"
  return "$status"
}

# install_packages PACKAGE...: the Debian packages the tests need.
install_packages() {
  quietly "apt-get update" apt-get update -qq
  quietly "installing ${*}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# install_ajv DIR: ajv-cli, the independent JSON Schema validator of the
# schema tests, into DIR/node_modules (kept between runs).
install_ajv() {
  local dir=$1
  if [ ! -x "$dir/node_modules/.bin/ajv" ]; then
    mkdir -p "$dir"
    quietly "npm install ajv-cli" npm install --prefix "$dir" --no-audit --no-fund ajv-cli@5.0.0
  fi
}

# fuzz_target TARGET PACKAGE FUZZTIME: runs one fuzz target for FUZZTIME.
# Go 1.26's fuzz coordinator can report the end of -fuzztime itself as a
# failure, "context deadline exceeded", when a worker is still in a call
# at that moment on a loaded machine (golang/go#75804, fixed in Go 1.27).
# A failure that says only that, and wrote no failing input, is run once
# more; any other failure, or a second one, fails.
fuzz_target() {
  local target=$1 pkg=$2 fuzztime=$3
  local log status=0 attempt
  log=$(mktemp)
  for attempt in 1 2; do
    status=0
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" 2>&1 | tee "$log" || status=$?
    if [ "$status" -eq 0 ]; then
      break
    fi
    if [ "$attempt" -eq 1 ] && grep -q '^    context deadline exceeded$' "$log" &&
      ! grep -q 'Failing input written to' "$log"; then
      echo ".ci/run: $target stopped with Go's fuzztime race (golang/go#75804: no failing input, only \"context deadline exceeded\"); running it once more" >&2
      continue
    fi
    break
  done
  rm -f "$log"
  return "$status"
}
