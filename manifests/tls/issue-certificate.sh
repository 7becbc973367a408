#!/bin/sh
# Issues the hook's serving certificate, once, as the Secret etcd-hook-tls
# that kubectl apply -k manifests/ serves HTTPS from: a self-signed CA of
# the hook's own (ten years) and a certificate for etcd-hook.<ns>.svc
# signed by it (ten years), in ca.crt, tls.crt and tls.key. Needs openssl
# and kubectl, pointed at the cluster.
#
#   manifests/tls/issue-certificate.sh                 # namespace etcd-hook
#   NAMESPACE=hooks manifests/tls/issue-certificate.sh
#
# A Secret that exists is left as it is (Metacontroller has read its CA):
# the script says so and exits 0. To rotate, see docs/install.md ("Serving
# the hook over HTTPS"). cert-manager users apply manifests/tls/cert-manager
# instead, which issues and renews it.
set -eu

NAMESPACE=${NAMESPACE:-etcd-hook}
SECRET=${SECRET:-etcd-hook-tls}
CLUSTER_DOMAIN=${CLUSTER_DOMAIN:-cluster.local}
DAYS=${DAYS:-3650}
KUBECTL=${KUBECTL:-kubectl}
host="etcd-hook.$NAMESPACE.svc"

if $KUBECTL -n "$NAMESPACE" get secret "$SECRET" >/dev/null 2>&1; then
	echo "Secret $NAMESPACE/$SECRET exists; left as it is"
	exit 0
fi

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$DAYS" \
	-subj "/CN=etcd-hook-ca" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=$host" -keyout "$dir/tls.key" -out "$dir/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' \
	"$host" "$host" "$CLUSTER_DOMAIN" >"$dir/ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
	-days "$DAYS" -extfile "$dir/ext" -out "$dir/tls.crt" 2>/dev/null

# Applied, not created, so that kubectl apply -k manifests/ takes the
# namespace over without a warning.
$KUBECTL get namespace "$NAMESPACE" >/dev/null 2>&1 ||
	printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$NAMESPACE" | $KUBECTL apply -f -
$KUBECTL -n "$NAMESPACE" create secret generic "$SECRET" \
	--from-file=tls.crt="$dir/tls.crt" --from-file=tls.key="$dir/tls.key" --from-file=ca.crt="$dir/ca.crt"
echo "Secret $NAMESPACE/$SECRET issued for $host"
