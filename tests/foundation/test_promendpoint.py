"""A Prometheus-API server behind a path prefix, a tenant and credentials (real sockets): what each setting puts on
the wire for both transports, a rotated token read again, and every unusable setting one line naming it. The same
against a real VictoriaMetrics with basic auth: tests/review/test_review_vm.py."""

from __future__ import annotations

import argparse
import json

import pytest

from goodput.foundation import promendpoint
from goodput.foundation.errors import ConfigError
from goodput.foundation.promapi import Unreachable
from goodput.foundation.promendpoint import ENV, Endpoint, Secret
from tests.foundation.test_promapi import QUERY, TRANSPORTS, J, serving

OK = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


def _args(**flags) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    promendpoint.add_arguments(p)
    argv = []
    for k, v in flags.items():
        for x in v if isinstance(v, list) else [v]:
            argv += [f"--prometheus-{k.removesuffix('s').replace('_', '-')}", x]
    return p.parse_args(argv)


@TRANSPORTS
def test_prefix_tenant_headers_and_token_file_reach_the_server(ask, tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    seen, headers = [], []
    with serving(200, J, OK, seen, headers) as url:
        server = promendpoint.from_args(f"{url}/select/0/prometheus/", _args(
            tenant="team-a", headers=["THANOS-TENANT: team-b"], token_file=str(token)), environ={})
        ask(server, QUERY)
        token.write_text("tok-2\n")  # rotated, as a projected Kubernetes token is: read again for the next run
        ask(server, QUERY)
    assert [p for _, p, _ in seen] == ["/select/0/prometheus/api/v1/query_range"] * 2
    assert [h["authorization"] for h in headers] == ["Bearer tok-1", "Bearer tok-2"]
    assert all(h["x-scope-orgid"] == "team-a" and h["thanos-tenant"] == "team-b" for h in headers)
    assert str(server) == f"{url}/select/0/prometheus"


@TRANSPORTS
def test_basic_auth_from_the_environment(ask):
    headers = []
    env = {ENV["user"]: "goodput", ENV["password"]: "pw", ENV["tenant"]: "t1", ENV["headers"]: "A: 1\nB: 2"}
    with serving(200, J, OK, headers=headers) as url:
        ask(promendpoint.from_env(url, env), QUERY)
    (h,) = headers
    assert h["authorization"] == "Basic Z29vZHB1dDpwdw==" and (h["x-scope-orgid"], h["a"], h["b"]) == ("t1", "1", "2")


def test_flags_win_over_the_environment():
    env = {ENV["tenant"]: "from-env", ENV["token"]: "env-token"}
    e = promendpoint.from_args("http://h:9090", _args(tenant="from-flag"), env)
    assert dict(e.headers)["X-Scope-OrgID"] == "from-flag" and e.secret.read() == "env-token"
    assert "env-token" not in repr(e)
    assert promendpoint.arguments_env(_args(tenant="x", headers=["A: 1", "B: 2"])) == {ENV["tenant"]: "x",
                                                                                      ENV["headers"]: "A: 1\nB: 2"}


@pytest.mark.parametrize("flags, env, says", [
    ({"headers": ["no colon"]}, {}, "--prometheus-header: no colon: expected a header 'Name: value'"),
    ({"headers": ["Bad Name: x"]}, {}, "expected a header"),
    ({"user": "u"}, {}, "--prometheus-user: u: needs a password"),
    ({"password_file": "pw"}, {}, "--prometheus-password-file: pw: needs the user it is for"),
    ({"user": "u", "token_file": "t"}, {ENV["password"]: "pw"}, "exclude each other"),
    ({"token_file": "/no/such/token"}, {}, "/no/such/token: --prometheus-token-file: cannot read"),
    ({}, {ENV["token"]: "  "}, f"{ENV['token']}: {ENV['token']}: empty, or more than one line"),
])
def test_an_unusable_setting_is_one_line_naming_it(flags, env, says):
    with pytest.raises(ConfigError) as e:
        promendpoint.from_args("http://h:9090", _args(**flags), env)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_credentials_in_the_url_are_refused_without_repeating_them():
    with pytest.raises(ConfigError) as e:
        promendpoint.from_env("http://user:hunter2@h:9090/prometheus", {})
    assert "hunter2" not in str(e.value) and "--prometheus-password-file" in str(e.value)


@TRANSPORTS
def test_a_secret_file_gone_later_is_unreachable_not_a_traceback(ask, tmp_path):
    token = tmp_path / "token"
    token.write_text("t")
    server = Endpoint("http://127.0.0.1:9", secret=Secret(token, flag="--prometheus-token-file")).check()
    token.unlink()
    with pytest.raises(Unreachable) as e:
        ask(server, QUERY)
    assert "credentials" in str(e.value) and "cannot read" in str(e.value)
