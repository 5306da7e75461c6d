#!/bin/sh
# One-shot set-up of the compose federation (compose.yaml's `setup` service, in the
# coordinator image): in the volume mounted at /fed, a CA and certificates for the three
# agencies and the coordinator, each agency's token and party.toml (its rows are the
# Challenger example's, mounted at /data), and the analyst's run.toml. On one host, for a
# trial: in a real federation each agency makes its own files on its own machine
# (docs/deployment.md), and the CA's key stays offline.
set -eu
fed=/fed
epsilon="${EPSILON:-10}"
if [ -f "$fed/run.toml" ]; then
    echo "already set up: $fed/run.toml"
    exit 0
fi
coordinator certs --dir "$fed/tls" agency-1 agency-2 agency-3 coordinator
for k in 1 2 3; do
    dir="$fed/agency-$k"
    mkdir -p "$dir"
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/token"
    chmod 600 "$dir/token"
    cat > "$dir/party.toml" <<TOML
name = "agency-$k"
listen = "0.0.0.0:50051"
metrics_listen = "0.0.0.0:9464"
ledger = "ledger.sqlite"
auth_token_file = "token"
neighbours = "substitute"

[budget]
epsilon = $epsilon
delta = 1e-5

[data]
format = "csv"
path = "/data/agency-$k.csv"

[tls]
ca = "$fed/tls/ca.pem"
cert = "$fed/tls/agency-$k.pem"
key = "$fed/tls/agency-$k.key"
allowed_clients = ["coordinator"]

$(cat /example/model.toml)
TOML
done
{
    cat /example/model.toml
    cat <<TOML

[sampler]                        # empty: the summaries route for a GLM, chosen by the coordinator
seed = 1

[tls]
ca = "$fed/tls/ca.pem"
cert = "$fed/tls/coordinator.pem"
key = "$fed/tls/coordinator.key"
TOML
    for k in 1 2 3; do
        printf '\n[[parties]]\nname = "agency-%s"\naddress = "https://agency-%s:50051"\ntoken_file = "%s/agency-%s/token"\n' \
            "$k" "$k" "$fed" "$k"
    done
} > "$fed/run.toml"
echo "set up in $fed: tls/, agency-1..3/, run.toml (ε = $epsilon per agency)"
