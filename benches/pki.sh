# Sourced by the TLS benchmarks: `make_pki DIR` writes a throwaway CA (ca.pem) and, signed by it,
# a server certificate for 127.0.0.1 and localhost (server.pem, server-key.pem) and a client
# certificate (client.pem, client-key.pem), all ECDSA P-256, valid two days, made by openssl.
make_pki() {
    local pki=$1 who usage
    mkdir -p "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
        -keyout "$pki/ca-key.pem" -out "$pki/ca.pem" 2>/dev/null
    for who in server client; do
        usage=serverAuth; [[ $who == client ]] && usage=clientAuth
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$who" \
            -keyout "$pki/$who-key.pem" -out "$pki/$who.csr" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$usage" >"$pki/$who.ext"
        openssl x509 -req -in "$pki/$who.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" -CAcreateserial \
            -days 2 -extfile "$pki/$who.ext" -out "$pki/$who.pem" 2>/dev/null
    done
}
