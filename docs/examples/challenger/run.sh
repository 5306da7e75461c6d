#!/usr/bin/env bash
# The Challenger example: three agencies each hold some of the 23 shuttle launches before
# Challenger (data/agency-*.csv) and sample the posterior of a logistic regression of O-ring
# damage on launch temperature together, each over mutual TLS with its own budget and
# ledger, without pooling their rows. Usage: run.sh OUT [EPSILON]
# Needs `party` and `coordinator` on PATH (e.g. PATH=$PWD/target/release:$PATH). The agencies'
# files are read from CHALLENGER_DATA (default: the data folder beside this script).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: run.sh OUT [EPSILON]}"
epsilon="${2:-1000000}"
data="$(cd "${CHALLENGER_DATA:-$here/data}" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# Certificates: a CA, one certificate per agency and one for the analyst's coordinator.
coordinator certs --dir "$out/tls" agency-1 agency-2 agency-3 coordinator > /dev/null

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for k in 1 2 3; do
    dir="$out/agency-$k"
    "$here/agency.sh" "$k" "$dir" 127.0.0.1:0 "$data" "$out/tls" "$epsilon"
    # The agency's node prints the address it listens on, then serves until stopped.
    party serve --config "$dir/party.toml" > "$dir/address" 2> "$dir/party.log" &
    pids+=($!)
done
# Wait for each node to listen; a node that exits (a bad row, a port in use, a bad config)
# or stays silent for a minute stops the script with its reason.
for k in 1 2 3; do
    tries=0
    until grep -q "listening on" "$out/agency-$k/address" 2>/dev/null; do
        if ! kill -0 "${pids[$((k - 1))]}" 2>/dev/null; then
            echo "agency-$k's party did not start; its log ($out/agency-$k/party.log):" >&2
            cat "$out/agency-$k/party.log" >&2
            exit 1
        fi
        if ((++tries > 600)); then
            echo "agency-$k's party did not listen within 60 s; its log: $out/agency-$k/party.log" >&2
            exit 1
        fi
        sleep 0.1
    done
done

{
    cat "$here/model.toml"
    cat <<TOML

[sampler]
variant = "penalty"
chains = 4
iterations = 4000
tau = 0.05
clip = 1e6                       # the model's public bound chooses each row's clip
proposal_sd = 0.05
seed = 1

[tls]
ca = "$out/tls/ca.pem"
cert = "$out/tls/coordinator.pem"
key = "$out/tls/coordinator.key"
TOML
    for k in 1 2 3; do
        address="$(sed -n 's/^listening on //p' "$out/agency-$k/address")"
        printf '\n[[parties]]\nname = "agency-%s"\naddress = "https://%s"\ntoken_file = "%s"\n' \
            "$k" "$address" "$out/agency-$k/token"
    done
} > "$out/run.toml"

coordinator run --config "$out/run.toml" --out "$out/draws"
