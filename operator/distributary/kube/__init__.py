"""The Kubernetes adapter: the only code that talks to the API server, and the local control plane.

Children are applied server-side, status is patched and events are recorded from here alone, so the
controllers above never hold a client of their own. `controlplane` starts a real kube-apiserver
(with etcd and the garbage collector) on this machine for tests and `make devcluster`.
"""
