"""The gateway fixture's reading of strace's connect() log (tests/support/gateway.py): lines as
strace 6.1 wrote them for LiteLLM's proxy, started with and without its local cost map."""

from __future__ import annotations

import pytest

from tests.support.gateway import Gateway

pytestmark = pytest.mark.unit

UPSTREAM = ('768   connect(12, {sa_family=AF_INET, sin_port=htons(18090), sin_addr=inet_addr("127.0.0.1")}, 16)'
            ' = -1 EINPROGRESS (Operation now in progress)')
LOOPBACK6 = ('770   connect(9, {sa_family=AF_INET6, sin6_port=htons(8080), sin6_flowinfo=htonl(0), '
             'inet_pton(AF_INET6, "::1", &sin6_addr), sin6_scope_id=0}, 28) = 0')
# Without LITELLM_LOCAL_MODEL_COST_MAP the proxy resolves the cost map's host at start.
DNS = '16116 connect(3, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0'
REMOTE6 = ('771   connect(9, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
           'inet_pton(AF_INET6, "2606:50c0:8000::154", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH')
OTHER = ('13895 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=14324} ---\n'
         '13895 connect(5, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT')


def _gateway(tmp_path, *lines: str) -> Gateway:
    (tmp_path / "connects.strace").write_text("\n".join(lines) + "\n")
    return Gateway(port=1, key="k", log=tmp_path / "log", connects=tmp_path / "connects.strace")


def test_loopback_and_local_sockets_are_not_outbound(tmp_path):
    gateway = _gateway(tmp_path, UPSTREAM, LOOPBACK6, OTHER)
    assert gateway.outbound_connects() == []
    assert gateway.connects_seen() == 2


def test_a_dns_lookup_and_a_remote_ipv6_address_are_outbound(tmp_path):
    gateway = _gateway(tmp_path, UPSTREAM, DNS, REMOTE6)
    assert gateway.outbound_connects() == [DNS, REMOTE6]
