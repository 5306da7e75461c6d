#!/bin/sh
# One-shot set-up of the compose federation (compose.yaml's `setup` service, in the
# coordinator image): in the volume mounted at /fed, a CA and certificates for the three
# agencies and the coordinator, each agency's token and party.toml (the Challenger
# example's `agency.sh`; the example's folder is mounted at /example), and the analyst's
# run.toml. On one host, for a trial: in a real federation each agency makes its own files
# on its own machine (docs/deployment.md), and the CA's key stays offline.
set -eu
fed=/fed
epsilon="${EPSILON:-10}"
if [ -f "$fed/run.toml" ]; then
    echo "already set up: $fed/run.toml"
    exit 0
fi
coordinator certs --dir "$fed/tls" agency-1 agency-2 agency-3 coordinator
for k in 1 2 3; do
    sh /example/agency.sh "$k" "$fed/agency-$k" 0.0.0.0:50051 /example/data "$fed/tls" \
        "$epsilon" 0.0.0.0:9464
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
