"""How a client reaches a secured Kafka: one model for the operator, the runner, jobs and the CLI.

`KafkaSecurity` is everything but the bootstrap servers (which already flow on their own through
every planner and client): the security protocol, the SASL mechanism and user, the CA that signs
the brokers' certificates, and the client's own certificate and key (PEM files). It is rendered
twice, because the two kinds of client speak different dialects: librdkafka settings for
confluent-kafka (the operator, the CLI, the runner's own producers) and Java client properties,
`kafka.`-prefixed, for Spark's Kafka source and sink.

It never holds a password, only where one is (`SecretReference`: an environment variable, a file,
or the client properties file a person gave): so the model can sit in a runner spec file, a
SparkApplication's argument, a status or a log line and reveal nothing. The password is read at
the last moment, by the process that opens the connection (`kafka.connection`), and handed to
`librdkafka` or `java_properties` here, whose results are passed to a client and never stored.

It is read from a Java client properties file (what `kafka-console-producer --command-config`
takes: `security.protocol`, `sasl.mechanism`, `sasl.jaas.config`, PEM trust and key stores) and
from the operator's DISTRIBUTARY_KAFKA_* environment. This module is pure: the caller reads files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from distributary.errors import DistributaryError

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)

# The JAAS login module of each SASL mechanism, as Java clients name it.
LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# The operator's environment (a Secret in the chart) -> the field it sets.
ENVIRONMENT = {
    "DISTRIBUTARY_KAFKA_SECURITY_PROTOCOL": "protocol",
    "DISTRIBUTARY_KAFKA_SASL_MECHANISM": "sasl_mechanism",
    "DISTRIBUTARY_KAFKA_SASL_USERNAME": "sasl_username",
    "DISTRIBUTARY_KAFKA_SSL_CA_LOCATION": "ssl_ca_location",
    "DISTRIBUTARY_KAFKA_SSL_CERTIFICATE_LOCATION": "ssl_certificate_location",
    "DISTRIBUTARY_KAFKA_SSL_KEY_LOCATION": "ssl_key_location",
}
PASSWORD_VARIABLE = "DISTRIBUTARY_KAFKA_SASL_PASSWORD"
PASSWORD_FILE_VARIABLE = "DISTRIBUTARY_KAFKA_SASL_PASSWORD_FILE"
SECURITY_VARIABLE = "DISTRIBUTARY_KAFKA_SECURITY"  # a job's model, as JSON (references only)
# What Spark redacts in the options and settings it prints: its default, and an inline client key.
SPARK_REDACTION = "(?i)secret|password|token|access[.]?key|keystore[.]key"


class KafkaConfigError(DistributaryError, ValueError):
    """Kafka connection settings that cannot work; the message names the setting and the fix."""


class _Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SecretReference(_Contract):
    """Where a secret is kept, never the secret: exactly one of an environment variable, a file
    holding only the secret (a mounted Secret's key), or a client properties file whose
    `sasl.jaas.config` (or `sasl.password`) holds it."""

    env: str | None = None
    file: str | None = None
    properties_file: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretReference:
        given = [v for v in (self.env, self.file, self.properties_file) if v]
        if len(given) != 1:
            raise ValueError("a secret reference names exactly one of env, file, properties_file")
        return self

    def describe(self) -> str:
        """Where the secret is, for a message."""
        if self.env:
            return f"environment variable {self.env}"
        if self.file:
            return f"file {self.file}"
        return f"the password in {self.properties_file}"


class KafkaSecurity(_Contract):
    """How clients authenticate to Kafka and trust it; the default is plaintext."""

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretReference | None = None
    ssl_ca_location: str | None = None
    """PEM file of the CA(s) that sign the brokers' certificates; None: the system's."""
    ssl_certificate_location: str | None = None
    """PEM file of the client's certificate (chain), for brokers that require one (mTLS)."""
    ssl_key_location: str | None = None
    """PEM file of the client's private key (unencrypted PKCS#8: BEGIN PRIVATE KEY)."""
    ssl_verify_hostname: bool = True
    """Whether the broker's certificate must name the host connected to."""

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        fix = "set security.protocol to SASL_SSL or SASL_PLAINTEXT, or drop the SASL settings"
        if self.sasl:
            missing = [
                name
                for name, value in (
                    ("sasl.mechanism", self.sasl_mechanism),
                    ("the user name (sasl.jaas.config username)", self.sasl_username),
                    ("the password (sasl.jaas.config password)", self.sasl_password),
                )
                if not value
            ]
            if missing:
                raise KafkaConfigError(
                    f"security.protocol {self.protocol} needs {', '.join(missing)}: give them "
                    "in the client properties file or the DISTRIBUTARY_KAFKA_SASL_* variables"
                )
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise KafkaConfigError(
                f"SASL settings given but security.protocol is {self.protocol}: {fix}"
            )
        files = (self.ssl_ca_location, self.ssl_certificate_location, self.ssl_key_location)
        if not self.tls and any(files):
            raise KafkaConfigError(
                f"TLS files given but security.protocol is {self.protocol}: set it to SSL or "
                "SASL_SSL, or drop the ssl.* settings"
            )
        if bool(self.ssl_certificate_location) != bool(self.ssl_key_location):
            raise KafkaConfigError(
                "a client certificate needs its private key and the other way round: give both "
                "(ssl.keystore.location with a PEM file holding both, or the certificate and key "
                "locations)"
            )
        return self

    @property
    def sasl(self) -> bool:
        """Whether clients authenticate with SASL."""
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        """Whether connections are encrypted with TLS."""
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def client_certificate(self) -> bool:
        """Whether clients present a certificate (mutual TLS)."""
        return bool(self.ssl_certificate_location)

    def describe(self) -> str:
        """The settings for a message or a log line: no secret, only where it is."""
        parts: list[str] = [self.protocol]
        if self.sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username!r}")
        if self.ssl_ca_location:
            parts.append(f"CA {self.ssl_ca_location}")
        if self.ssl_certificate_location:
            parts.append(f"client certificate {self.ssl_certificate_location}")
        return ", ".join(parts)

    def librdkafka(self, password: str | None) -> dict[str, str]:
        """Settings for confluent-kafka clients; `password` is the resolved SASL password."""
        config: dict[str, str] = {"security.protocol": self.protocol}
        if self.sasl:
            assert self.sasl_mechanism
            assert self.sasl_username
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = _need_password(self, password)
        if self.tls:
            if self.ssl_ca_location:
                config["ssl.ca.location"] = self.ssl_ca_location
            if self.ssl_certificate_location and self.ssl_key_location:
                config["ssl.certificate.location"] = self.ssl_certificate_location
                config["ssl.key.location"] = self.ssl_key_location
            if not self.ssl_verify_hostname:
                config["ssl.endpoint.identification.algorithm"] = "none"
        return config

    def java_properties(
        self, password: str | None, client_pem: tuple[str, str] | None = None
    ) -> dict[str, str]:
        """Java client properties (Spark's Kafka source and sink take them `kafka.`-prefixed).
        A client key and certificate in one PEM file are named as the key store; in two files,
        Java cannot read them, so their text (`client_pem`: key, certificate chain) is given
        inline, which Kafka treats as a password (hidden in its logs, redacted by Spark's)."""
        config: dict[str, str] = {"security.protocol": self.protocol}
        if self.sasl:
            assert self.sasl_mechanism
            assert self.sasl_username
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.jaas.config"] = jaas_config(
                self.sasl_mechanism, self.sasl_username, _need_password(self, password)
            )
        if self.tls:
            if self.ssl_ca_location:
                config["ssl.truststore.type"] = "PEM"
                config["ssl.truststore.location"] = self.ssl_ca_location
            if self.client_certificate:
                config["ssl.keystore.type"] = "PEM"
                if self.ssl_certificate_location == self.ssl_key_location:
                    assert self.ssl_key_location
                    config["ssl.keystore.location"] = self.ssl_key_location
                elif client_pem is None:
                    raise KafkaConfigError(
                        "the client key and certificate were not read for Java clients"
                    )
                else:
                    config["ssl.keystore.key"], config["ssl.keystore.certificate.chain"] = (
                        client_pem
                    )
            if not self.ssl_verify_hostname:
                config["ssl.endpoint.identification.algorithm"] = ""
        return config


def _need_password(security: KafkaSecurity, password: str | None) -> str:
    if password is None:
        where = security.sasl_password.describe() if security.sasl_password else "nowhere"
        raise KafkaConfigError(f"the SASL password ({where}) was not resolved")
    return password


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The `sasl.jaas.config` of a Java client logging in as `username`."""
    return (
        f'{LOGIN_MODULES[mechanism]} required username="{_quoted(username)}" '
        f'password="{_quoted(password)}";'
    )


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')


def jaas_options(text: str) -> dict[str, str]:
    """The options of a `sasl.jaas.config` value (`Module required key="value" ...;`)."""
    options = {}
    for match in _JAAS_OPTION.finditer(text):
        quoted, bare = match.group(2), match.group(3)
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        options[match.group(1)] = value
    return options


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties` text as a dict: `key=value` or `key: value` lines, `#` and `!`
    comments, a trailing backslash continuing a line, backslash escapes in values."""
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        result[key] = value
    return result


def _split_property(line: str) -> tuple[str, str]:
    match = re.match(r"((?:[^=:\s\\]|\\.)*)\s*[=:\s]?\s*(.*)$", line)
    assert match is not None
    key, value = match.group(1), match.group(2)
    unescape = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return (
        re.sub(r"\\(.)", lambda m: m.group(1), key),
        re.sub(r"\\(.)", lambda m: unescape.get(m.group(1), m.group(1)), value),
    )


def password_in_properties(properties: Mapping[str, str]) -> str | None:
    """The SASL password a client properties file holds (`sasl.jaas.config`'s, else
    librdkafka's `sasl.password`)."""
    jaas = properties.get("sasl.jaas.config")
    if jaas:
        return jaas_options(jaas).get("password")
    return properties.get("sasl.password")


# Properties a client properties file may hold that this model does not need, and why they are
# refused rather than ignored (ignoring them would connect differently than the file says).
_REFUSED = {
    "ssl.key.password": "an encrypted private key: decrypt it to PKCS#8 PEM "
    "(openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pem) and drop ssl.key.password",
    "ssl.keystore.key": "an inline key: put the key and certificate in a PEM file and name it "
    "in ssl.keystore.location",
    "ssl.truststore.certificates": "inline certificates: put them in a PEM file and name it in "
    "ssl.truststore.location",
}


def security_from_properties(
    properties: Mapping[str, str], source: str
) -> tuple[KafkaSecurity, str | None]:
    """The model and the bootstrap servers (if named) of a client properties file at `source`;
    its password stays in the file, which the model names as the password's reference."""
    where = f"Kafka client properties {source}"
    for key, why in _REFUSED.items():
        if properties.get(key):
            raise KafkaConfigError(f"{where}: {key} is not supported ({why})")
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise KafkaConfigError(
            f"{where}: security.protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}"
        )
    values: dict[str, object] = {"protocol": protocol}
    if protocol.startswith("SASL_"):
        values.update(_sasl_from_properties(properties, where, source))
    if protocol in ("SSL", "SASL_SSL"):
        values.update(_tls_from_properties(properties, where))
    return _built(values, where), properties.get("bootstrap.servers") or None


def _sasl_from_properties(
    properties: Mapping[str, str], where: str, source: str
) -> dict[str, object]:
    mechanism = (
        properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or ""
    ).upper()
    if mechanism not in MECHANISMS:
        raise KafkaConfigError(
            f"{where}: sasl.mechanism {mechanism or '(none)'!r} is not one of "
            f"{', '.join(MECHANISMS)}: set it to the mechanism the brokers enable"
        )
    jaas = jaas_options(properties.get("sasl.jaas.config", ""))
    username = jaas.get("username") or properties.get("sasl.username")
    if not username or password_in_properties(properties) is None:
        raise KafkaConfigError(
            f"{where}: SASL needs a user and a password: set sasl.jaas.config to "
            f'{LOGIN_MODULES[mechanism]} required username="..." password="...";'
        )
    return {
        "sasl_mechanism": mechanism,
        "sasl_username": username,
        "sasl_password": SecretReference(properties_file=source),
    }


def _tls_from_properties(properties: Mapping[str, str], where: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for store in ("truststore", "keystore"):
        kind = properties.get(f"ssl.{store}.type", "").upper()
        if properties.get(f"ssl.{store}.location") and kind != "PEM":
            raise KafkaConfigError(
                f"{where}: ssl.{store}.type is {kind or 'JKS (the default)'}; only PEM is "
                f"supported: convert the {store} to PEM and set ssl.{store}.type=PEM"
            )
    ca = properties.get("ssl.truststore.location") or properties.get("ssl.ca.location")
    if ca:
        values["ssl_ca_location"] = ca
    keystore = properties.get("ssl.keystore.location")
    if keystore:  # one PEM file with the key and the certificate chain
        values["ssl_certificate_location"] = keystore
        values["ssl_key_location"] = keystore
    else:
        values["ssl_certificate_location"] = properties.get("ssl.certificate.location")
        values["ssl_key_location"] = properties.get("ssl.key.location")
    algorithm = properties.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() in ("", "none"):
        values["ssl_verify_hostname"] = False
    return values


def security_from_environment(environ: Mapping[str, str]) -> KafkaSecurity:
    """The model the operator's DISTRIBUTARY_KAFKA_* variables describe; the password stays in
    its variable (or the file DISTRIBUTARY_KAFKA_SASL_PASSWORD_FILE names)."""
    values: dict[str, object] = {
        field: environ[name] for name, field in ENVIRONMENT.items() if environ.get(name)
    }
    for field, allowed in (("protocol", PROTOCOLS), ("sasl_mechanism", MECHANISMS)):
        if field in values:
            values[field] = str(values[field]).upper()
            if values[field] not in allowed:
                name = next(n for n, f in ENVIRONMENT.items() if f == field)
                raise KafkaConfigError(
                    f"{name} is {environ[name]!r}, not one of {', '.join(allowed)}: fix it"
                )
    if environ.get(PASSWORD_FILE_VARIABLE):
        values["sasl_password"] = SecretReference(file=environ[PASSWORD_FILE_VARIABLE])
    elif environ.get(PASSWORD_VARIABLE):
        values["sasl_password"] = SecretReference(env=PASSWORD_VARIABLE)
    return _built(values, "the DISTRIBUTARY_KAFKA_* environment")


def _built(values: Mapping[str, object], where: str) -> KafkaSecurity:
    """The model of `values`, or a KafkaConfigError that says where they came from."""
    try:
        return KafkaSecurity.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        cause = (error.get("ctx") or {}).get("error")
        said = (
            str(cause)
            if cause is not None
            else f"{'.'.join(map(str, error['loc']))}: {error['msg']}"
        )
        raise KafkaConfigError(f"{where}: {said}") from None
