// Package controlplane runs a Kubernetes control plane on loopback from
// Kubernetes' own code: embedded etcd, kube-apiserver, kube-controller-manager
// (the controllers a DRA pod needs) and kube-scheduler, each in a process of
// its own, with the certificates, keys and kubeconfigs they need kept in one
// directory. No kubelet and no container runtime run: nodes are API objects.
package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// An identity signed by the directory's CA: a serving certificate or a
// client certificate whose CN is the user and whose O entries the groups.
type identity struct {
	file   string
	cn     string
	groups []string
	server bool
}

// The CA, the API server's serving certificate, the service-account key pair
// and the clients' certificates, made once per directory.
func ensurePKI(pki string) error {
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return err
	}
	caCert, caKey, err := loadOrMakeCA(pki)
	if err != nil {
		return err
	}
	ids := []identity{
		{file: "apiserver", cn: "kube-apiserver", server: true},
		{file: "admin", cn: "vp2p-admin", groups: []string{"system:masters"}},
		{file: "scheduler", cn: "system:kube-scheduler"},
		{file: "controller-manager", cn: "system:kube-controller-manager"},
		// The API server's client identity towards aggregated API servers,
		// which the components' delegated authentication expects to find.
		{file: "front-proxy-client", cn: "front-proxy-client"},
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(pki, id.file+".crt")); err == nil {
			continue
		}
		if err := issue(pki, caCert, caKey, id); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(pki, "sa.key")); err != nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		if err := writeKey(filepath.Join(pki, "sa.key"), key); err != nil {
			return err
		}
		pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(pki, "sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// NodeIdentity issues (once) the client certificate a node's kubelet
// authenticates with: CN system:node:NAME in group system:nodes, what the
// Node authorizer and NodeRestriction admission key on.
func NodeIdentity(dir, node string) (cert, key string, err error) {
	return ClientIdentity(dir, "node-"+node, "system:node:"+node, "system:nodes")
}

// ClientIdentity issues (once) DIR/pki/FILE.{crt,key}, a client certificate
// of user cn in groups, e.g. system:kube-proxy, which the bootstrap role
// binding system:node-proxier names.
func ClientIdentity(dir, file, cn string, groups ...string) (cert, key string, err error) {
	pki := filepath.Join(dir, "pki")
	cert = filepath.Join(pki, file+".crt")
	key = filepath.Join(pki, file+".key")
	if _, err := os.Stat(cert); err == nil {
		return cert, key, nil
	}
	caCert, caKey, err := loadOrMakeCA(pki)
	if err != nil {
		return "", "", err
	}
	id := identity{file: file, cn: cn, groups: groups}
	return cert, key, issue(pki, caCert, caKey, id)
}

func loadOrMakeCA(pki string) (*x509.Certificate, crypto.Signer, error) {
	certPath, keyPath := filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key")
	if _, err := os.Stat(certPath); err == nil {
		return loadPair(certPath, keyPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "vp2p-kube-peers-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func issue(pki string, caCert *x509.Certificate, caKey crypto.Signer, id identity) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.cn, Organization: id.groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if id.server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		// Loopback, the `kubernetes` Service's address, and the host's
		// loopback as QEMU's user network shows it to a booted node.
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.ParseIP("10.96.0.1"),
			net.ParseIP("10.0.2.2")}
		tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(pki, id.file+".key"), key); err != nil {
		return err
	}
	return writePEM(filepath.Join(pki, id.file+".crt"), "CERTIFICATE", der, 0o644)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s: not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	return cert, key, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err)
	}
	return n
}
