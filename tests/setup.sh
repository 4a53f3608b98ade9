# Sourced by tests/run.sh and tests/stress.sh (from the repository root, under `set -euo pipefail`): install
# everything the test suite needs on a fresh Debian machine and start the services it talks to. Sets VENV (the
# virtual environment the suite runs in) and defines apt_install. TRAINLEDGER_NO_PIP=1 uses $VENV as it is (a
# shared, already installed venv: nothing is reinstalled into it); CI never sets it.

VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- Python environment ------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
if [ "${TRAINLEDGER_NO_PIP:-}" != "1" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  # The CPU torch pin first: an unpinned torch would pull a multi-GB CUDA build.
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[train,test,hf,lightning]"  # hf, lightning: tests/capture's real tiny runs
fi
# The repository's own modules compiled once, as a wheel install has them (pip compiles what it installs; an
# editable install's sources are compiled by the first process that imports them, and not even then where
# PYTHONDONTWRITEBYTECODE is set, as on these machines): else every `trainledger`, wrapper and trainer process of
# the suite compiles the modules it imports, ~0.13 CPU-seconds each (issue 38). A source changed later is compiled
# again by Python as usual (its .pyc records the source's time and size).
"$VENV/bin/python" -m compileall -q -j 0 ledger app trainer bench tests >/dev/null

# --- PostgreSQL: its programs (initdb, pg_ctl, pg_dump: pytest starts the run's own server, tests/pgcluster.py),
# and the machine's server at 127.0.0.1:5432 (for TRAINLEDGER_TEST_PG and the benchmarks) --
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! command -v pg_dump >/dev/null 2>&1; then
  apt_install postgresql postgresql-client
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  for v in $(ls /etc/postgresql 2>/dev/null); do
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main start || true
  done
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1" >/dev/null 2>&1; then
  # a fresh Debian cluster: let the local postgres user in without a password over loopback
  hba=$(ls /etc/postgresql/*/main/pg_hba.conf | head -1)
  $SUDO sed -i -E 's/^(host\s+all\s+all\s+127\.0\.0\.1\/32\s+)\S+/\1trust/' "$hba"
  for v in $(ls /etc/postgresql); do $SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main reload || true; done
  sleep 1
fi
psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1" >/dev/null

# --- Chromium for the dashboard's browser test (Playwright drives the Debian build; no browser downloads) --
if [ ! -x /usr/bin/chromium ]; then
  apt_install chromium
fi

# --- a real OpenID provider for the OIDC sign-in tests: panva/oidc-provider under node (tests/oidc, pinned by its
# package-lock.json; each test starts its own on a free loopback port, nothing is downloaded while tests run) --
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_install nodejs npm
fi
if [ ! -d tests/oidc/node_modules/oidc-provider ] || [ tests/oidc/package-lock.json -nt tests/oidc/node_modules/.package-lock.json ]; then
  npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error >/dev/null
fi

# --- Prometheus (and promtool) for tests/collect and tests/test_exporter.py (each starts its own server on a free loopback port) --
if ! command -v prometheus >/dev/null 2>&1; then
  apt_install prometheus
fi

# --- Slurm for tests/slurm (a session fixture starts munged, slurmdbd, slurmctld and slurmd in a temporary
# directory with their own config and ports; nothing is started here) and the MariaDB server slurmdbd
# stores into (127.0.0.1:3306, root without a password; the fixture creates and drops its own database) --
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmdbd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  apt_install slurm-wlm slurmdbd munge
fi
if ! mysql -h 127.0.0.1 -P 3306 -u root -e "select 1" >/dev/null 2>&1; then
  if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1; then
    apt_install mariadb-server
  fi
  # no systemd in CI containers: start the server directly (as the mysql user), then wait for it
  $SUDO mkdir -p /run/mysqld && $SUDO chown mysql:mysql /run/mysqld
  (command -v mysqld_safe >/dev/null 2>&1 && $SUDO mysqld_safe --bind-address=127.0.0.1 --port=3306 >/dev/null 2>&1 &) || true
  for _ in $(seq 60); do mysql -h 127.0.0.1 -P 3306 -u root -e "select 1" >/dev/null 2>&1 && break; sleep 1; done
  if ! mysql -h 127.0.0.1 -P 3306 -u root -e "select 1" >/dev/null 2>&1; then
    # a fresh Debian server lets root in by unix socket only: allow root over loopback without a password
    $SUDO mysql -u root -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; \
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES;" || true
  fi
fi
mysql -h 127.0.0.1 -P 3306 -u root -e "select 1" >/dev/null
# --- a C compiler for tests/capture's NVML test double (libnvidia-ml.so.1 built from tests/capture/fake_nvml.c) --
if ! command -v cc >/dev/null 2>&1; then
  apt_install gcc libc6-dev
fi
