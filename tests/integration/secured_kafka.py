"""A secured embedded broker for tests: real TLS and SCRAM, certificates made by openssl.

`devtools.certificates` makes a throwaway CA, a broker certificate for 127.0.0.1 and a client
certificate. `SecuredKafka` starts the embedded broker with a SASL_SSL listener (SCRAM-SHA-512)
and an SSL listener that requires client certificates, and writes the Java client properties
files a person would write for each (what `kafka-console-producer --command-config` takes), so
tests drive the command line the way people do.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from distributary.devtools.certificates import Certificates, make_certificates
from distributary.local.broker import BrokerSecurity, EmbeddedBroker

USER = "clickstream"


@dataclass
class SecuredKafka:
    """A running secured broker and the client properties files that reach it."""

    broker: EmbeddedBroker
    certificates: Certificates
    password: str
    sasl_properties: Path  # SASL_SSL, SCRAM-SHA-512, the CA
    mtls_properties: Path  # SSL with the client's certificate (one PEM key store)
    mtls_split_properties: Path  # the same, key and certificate in two files (librdkafka names)

    @property
    def sasl_servers(self) -> str:
        """The SASL_SSL listener."""
        return self.broker.bootstrap_servers

    @property
    def mtls_servers(self) -> str:
        """The mTLS listener."""
        return self.broker.ssl_bootstrap_servers

    def properties_with_password(self, path: Path, password: str) -> Path:
        """A copy of the SASL properties file with another password, at `path`."""
        text = self.sasl_properties.read_text().replace(self.password, password)
        path.write_text(text)
        return path

    def stop(self) -> None:
        """Stop the broker."""
        self.broker.stop()


def start_secured_kafka(folder: Path) -> SecuredKafka:
    """Certificates, the broker with its SASL_SSL and mTLS listeners, and properties files."""
    made = make_certificates(folder / "tls")
    password = secrets.token_urlsafe(18)
    security = BrokerSecurity(made.ca, made.broker, made.broker_key, {USER: password})
    broker = EmbeddedBroker(folder / "kafka", security=security).start()
    sasl = folder / "sasl-ssl.properties"
    sasl.write_text(
        "# SASL_SSL with SCRAM-SHA-512, the broker's CA as trust store\n"
        f"bootstrap.servers={broker.bootstrap_servers}\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="{USER}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={made.ca}\n"
    )
    mtls = folder / "mtls.properties"
    mtls.write_text(
        "# mutual TLS: the client's key and certificate in one PEM key store\n"
        f"bootstrap.servers={broker.ssl_bootstrap_servers}\n"
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={made.ca}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={made.client_keystore}\n"
    )
    split = folder / "mtls-split.properties"
    split.write_text(
        "# mutual TLS, with librdkafka's names: the key and the certificate in two files\n"
        f"bootstrap.servers={broker.ssl_bootstrap_servers}\n"
        "security.protocol=SSL\n"
        f"ssl.ca.location={made.ca}\n"
        f"ssl.certificate.location={made.client}\n"
        f"ssl.key.location={made.client_key}\n"
    )
    return SecuredKafka(broker, made, password, sasl, mtls, split)
