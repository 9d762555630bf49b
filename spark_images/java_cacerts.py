"""Make Java's trust store the same bytes for the same certificates.

Debian's ca-certificates-java writes /etc/ssl/certs/java/cacerts at install time as a JKS key
store, each entry stamped with the moment it was added: two builds of the same image would
differ there alone. This rewrites the store with every entry's date at 0 and the entries in the
order of their aliases, then its integrity digest (SHA-1 over the password in UTF-16BE, the
words "Mighty Aphrodite" and the store), as the JKS format defines. Only trusted-certificate
entries are expected; anything else stops the build.

    python3 java_cacerts.py [PATH] [PASSWORD]
"""

import hashlib
import struct
import sys

MAGIC = 0xFEEDFEED
TRUSTED_CERTIFICATE = 2


def read(data: bytes) -> tuple[int, list[tuple[bytes, bytes, bytes]]]:
    """The store's version and its entries: (alias, certificate type, certificate), UTF as
    stored (length-prefixed)."""
    magic, version, count = struct.unpack_from(">III", data, 0)
    if magic != MAGIC or version not in (1, 2):
        sys.exit(f"not a JKS store (magic {magic:#x}, version {version})")
    at, entries = 12, []
    for _ in range(count):
        (tag,) = struct.unpack_from(">I", data, at)
        if tag != TRUSTED_CERTIFICATE:
            sys.exit(f"entry of kind {tag}: only trusted certificates are expected")
        at += 4
        (length,) = struct.unpack_from(">H", data, at)
        alias = data[at : at + 2 + length]
        at += 2 + length + 8  # the alias, then the date
        kind = b""
        if version == 2:
            (length,) = struct.unpack_from(">H", data, at)
            kind = data[at : at + 2 + length]
            at += 2 + length
        (length,) = struct.unpack_from(">I", data, at)
        certificate = data[at : at + 4 + length]
        at += 4 + length
        entries.append((alias, kind, certificate))
    if at + 20 != len(data):
        sys.exit(f"{len(data) - at - 20} bytes after the entries")
    return version, entries


def write(version: int, entries: list[tuple[bytes, bytes, bytes]], password: str) -> bytes:
    body = struct.pack(">III", MAGIC, version, len(entries))
    for alias, kind, certificate in sorted(entries):
        body += struct.pack(">I", TRUSTED_CERTIFICATE) + alias + struct.pack(">q", 0)
        body += kind + certificate
    digest = hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite" + body)
    return body + digest.digest()


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "/etc/ssl/certs/java/cacerts"
    password = sys.argv[2] if len(sys.argv) > 2 else "changeit"
    with open(path, "rb") as store:
        data = store.read()
    expected = hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite" + data[:-20])
    if expected.digest() != data[-20:]:
        sys.exit(f"{path}: the integrity digest does not match the password")
    version, entries = read(data)
    with open(path, "wb") as store:
        store.write(write(version, entries, password))
    print(f"{path}: {len(entries)} certificates, dated 0, in the order of their aliases")


if __name__ == "__main__":
    main()
