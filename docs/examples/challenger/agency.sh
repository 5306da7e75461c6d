#!/bin/sh
# One agency's directory for the Challenger example: its token (owner-only) and party.toml,
# written into DIR. Used by run.sh (three agencies on one machine) and by the containers'
# set-up (docs/containers/setup.sh). Usage:
#
#   agency.sh K DIR LISTEN DATA TLS EPSILON [METRICS]
#
# K is the agency's number (its name is agency-K), LISTEN the address it serves on, DATA the
# folder holding agency-K.csv, TLS the folder of `coordinator certs`' files, EPSILON its
# budget, METRICS the address of /health and /metrics (none if not given).
set -eu
k="$1" dir="$2" listen="$3" data="$4" tls="$5" epsilon="$6" metrics="${7:-}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$dir"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
chmod 600 "$dir/token"
{
    # Top-level keys come before the first table.
    if [ -n "$metrics" ]; then
        echo "metrics_listen = \"$metrics\""
    fi
    cat <<TOML
name = "agency-$k"
listen = "$listen"
ledger = "ledger.sqlite"
auth_token_file = "token"
neighbours = "substitute"

[budget]
epsilon = $epsilon
delta = 1e-5

[data]
format = "csv"
path = "$data/agency-$k.csv"

[tls]
ca = "$tls/ca.pem"
cert = "$tls/agency-$k.pem"
key = "$tls/agency-$k.key"
allowed_clients = ["coordinator"]

TOML
    cat "$here/model.toml"
} > "$dir/party.toml"
