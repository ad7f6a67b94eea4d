"""Where a Prometheus-API server is and how to sign in to it: Prometheus itself, or a long-term store that answers
the same API (VictoriaMetrics, Thanos Query, Grafana Mimir) behind a path prefix, a tenant header and credentials.

The URL carries the prefix (``http://vmselect:8481/select/0/prometheus`` for a VictoriaMetrics cluster's tenant 0,
``http://mimir:8080/prometheus``); ``/api/v1/...`` is appended to it. A tenant is the ``X-Scope-OrgID`` header
(Mimir, Cortex); any other header (Thanos' ``THANOS-TENANT``, a gateway's) is ``Name: value``. Credentials never
sit in the URL or on the command line: the URL is printed in reports and errors, and a command line is visible to
every user of the machine. A password or bearer token comes from a file (re-read for every batch of queries, so a
rotated Kubernetes token is picked up, as Prometheus reads its ``credentials_file``) or from an environment
variable. The same settings come from flags (``add_arguments``: review, plan) or the environment (``from_env``: the
console), flags first.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from goodput.foundation.errors import ConfigError

if TYPE_CHECKING:
    import httpx

__all__ = ["ENV", "MAX_HEADERS", "MAX_SECRET_BYTES", "TENANT_HEADER", "Endpoint", "add_arguments", "arguments_env", "from_args",
           "from_env"]

TENANT_HEADER = "X-Scope-OrgID"
MAX_SECRET_BYTES = 64 * 1024  # a Kubernetes service-account token is ~1 KB
MAX_HEADERS = 32
# setting -> environment variable; the secrets themselves only ever come from a file or the environment
ENV = {"tenant": "GOODPUT_PROMETHEUS_TENANT", "headers": "GOODPUT_PROMETHEUS_HEADERS",
       "user": "GOODPUT_PROMETHEUS_USER", "password_file": "GOODPUT_PROMETHEUS_PASSWORD_FILE",
       "password": "GOODPUT_PROMETHEUS_PASSWORD", "token_file": "GOODPUT_PROMETHEUS_TOKEN_FILE",
       "token": "GOODPUT_PROMETHEUS_TOKEN"}
_FLAGS = {"tenant": "--prometheus-tenant", "headers": "--prometheus-header", "user": "--prometheus-user",
          "password_file": "--prometheus-password-file", "token_file": "--prometheus-token-file"}


@dataclass(frozen=True)
class Secret:
    """A password or token: the contents of ``file`` (read each time, stripped), or ``value``, taken from the
    environment variable ``env`` (never shown in a repr)."""

    file: Path | None = None
    env: str | None = None
    flag: str = ""  # what named it, for errors
    value: str = field(default="", repr=False)

    def read(self) -> str:
        if self.file is not None:
            try:
                with open(self.file, "rb") as fh:
                    data = fh.read(MAX_SECRET_BYTES + 1)
            except OSError as e:
                raise ConfigError(str(self.file), self.flag, f"cannot read ({e.strerror or e})") from None
            if len(data) > MAX_SECRET_BYTES:
                raise ConfigError(str(self.file), self.flag, f"larger than {MAX_SECRET_BYTES} bytes")
            value = data.decode("utf-8", "replace").strip()
        else:
            value = self.value.strip()
        if not value or "\n" in value:
            raise ConfigError(str(self.file or self.env), self.flag, "empty, or more than one line")
        return value


@dataclass(frozen=True)
class Endpoint:
    """A Prometheus-API server: ``url`` (with any path prefix, no credentials), ``headers`` sent with every query,
    and basic-auth (``user`` + ``secret``) or bearer-token (``secret`` alone) credentials."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    user: str | None = None
    secret: Secret | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", self.url.rstrip("/"))

    def __str__(self) -> str:
        return self.url

    def auth(self) -> tuple[dict[str, str], httpx.Auth | None]:
        """The headers and auth of a batch of queries; secrets are read now (a ``ConfigError`` if they cannot be)."""
        import httpx  # only a command that queries needs it, not its --help

        headers = dict(self.headers)
        if self.secret is None:
            return headers, None
        value = self.secret.read()
        if self.user is not None:
            return headers, httpx.BasicAuth(self.user, value)
        return {**headers, "Authorization": f"Bearer {value}"}, None

    def check(self) -> Endpoint:
        """The endpoint if its URL, headers and secrets are usable now; else the ``ConfigError`` that says why."""
        import httpx

        u = httpx.URL(self.url)
        if u.userinfo:
            raise ConfigError(self.url.replace(u.userinfo.decode(), "***"), "URL",
                              "credentials in a URL end up in reports, logs and the process list; give the user "
                              f"with {_FLAGS['user']} and the password in {_FLAGS['password_file']} or "
                              f"{ENV['password']}")
        self.auth()
        return self


def _header(text: str, where: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value or any(c in name for c in " \t\r\n") or any(c in value for c in "\r\n"):
        raise ConfigError(where, text, "expected a header 'Name: value'")
    return name, value


def _endpoint(url: str, v: Mapping[str, str | list[str] | None], environ: Mapping[str, str] | None) -> Endpoint:
    env = os.environ if environ is None else environ
    raw = v.get("headers") or []
    lines = raw.splitlines() if isinstance(raw, str) else raw
    if len(lines) > MAX_HEADERS:
        raise ConfigError(_FLAGS["headers"], str(len(lines)), f"at most {MAX_HEADERS} headers")
    headers = [_header(h, _FLAGS["headers"]) for h in lines if h.strip()]
    if v.get("tenant"):
        headers.append((TENANT_HEADER, _header(f"{TENANT_HEADER}: {v['tenant']}", _FLAGS["tenant"])[1]))
    user = v.get("user") or None
    pw_file, token_file = v.get("password_file"), v.get("token_file")
    secret = None
    if user is not None:
        if pw_file:
            secret = Secret(Path(str(pw_file)), flag=_FLAGS["password_file"])
        elif env.get(ENV["password"]):
            secret = Secret(env=ENV["password"], flag=ENV["password"], value=env[ENV["password"]])
        else:
            raise ConfigError(_FLAGS["user"], str(user), f"needs a password: {_FLAGS['password_file']} FILE or "
                                                         f"{ENV['password']}")
    elif pw_file:
        raise ConfigError(_FLAGS["password_file"], str(pw_file), f"needs the user it is for: {_FLAGS['user']}")
    if token_file or env.get(ENV["token"]):
        if secret is not None:
            raise ConfigError(_FLAGS["token_file"], str(token_file or ENV["token"]),
                              "a bearer token and a basic-auth user exclude each other")
        secret = (Secret(Path(str(token_file)), flag=_FLAGS["token_file"]) if token_file
                  else Secret(env=ENV["token"], flag=ENV["token"], value=env[ENV["token"]]))
    return Endpoint(url, tuple(headers), str(user) if user is not None else None, secret).check()


def add_arguments(p: argparse.ArgumentParser, what: str = "--prometheus") -> None:
    """The flags of a command that reads a Prometheus-API server (named by ``what``), each also read from its
    environment variable."""
    g = p.add_argument_group(f"the server {what} names (Prometheus, VictoriaMetrics, Thanos, Mimir; docs/metrics-stores.md)")
    g.add_argument(_FLAGS["tenant"], metavar="ID", default=None,
                   help=f"tenant, sent as the {TENANT_HEADER} header (Mimir, Cortex) ({ENV['tenant']})")
    g.add_argument(_FLAGS["headers"], metavar="'NAME: VALUE'", action="append", default=None,
                   help=f"a header sent with every query, e.g. 'THANOS-TENANT: team-a'; repeatable ({ENV['headers']}, "
                        "one a line)")
    g.add_argument(_FLAGS["user"], metavar="NAME", default=None,
                   help=f"basic-auth user; the password from {_FLAGS['password_file']} or {ENV['password']} "
                        f"({ENV['user']})")
    g.add_argument(_FLAGS["password_file"], metavar="FILE", default=None,
                   help=f"file holding the basic-auth password, read for every run of queries ({ENV['password_file']})")
    g.add_argument(_FLAGS["token_file"], metavar="FILE", default=None,
                   help=f"file holding a bearer token, read for every run of queries ({ENV['token_file']}; the "
                        f"token itself: {ENV['token']})")


def _given(args: argparse.Namespace) -> dict[str, str | list[str] | None]:
    return {k: getattr(args, f.removeprefix("--").replace("-", "_"), None) for k, f in _FLAGS.items()}


def from_args(url: str, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint at ``url`` with the flags ``add_arguments`` added, the environment where a flag is not given."""
    env = os.environ if environ is None else environ
    return _endpoint(url, {k: x if x is not None else env.get(ENV[k]) for k, x in _given(args).items()}, env)


def arguments_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment variables that say what the flags given say (``goodput console`` hands them to the app)."""
    return {ENV[k]: "\n".join(x) if isinstance(x, list) else str(x) for k, x in _given(args).items() if x is not None}


def from_env(url: str, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The endpoint at ``url`` with the settings of the environment (``ENV``)."""
    env = os.environ if environ is None else environ
    return _endpoint(url, {k: env.get(ENV[k]) for k in _FLAGS}, env)
