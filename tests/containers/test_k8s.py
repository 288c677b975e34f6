"""The Kubernetes manifests (deploy/k8s/): valid against Kubernetes' own schemas (offline, strict:
no unknown field), and consistent with the command lines and with each other: every consumer
reaches the daemon's socket and shm directory on its node, and the daemon is reachable by peers.
"""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from fabricd.cli import build_parser as fabricd_parser
from tools.ctl import build_parser as ctl_parser

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
VERSIONS = ["1.28.0", kubernetes_validate.latest_version()]
SHM = "/dev/shm"


def documents() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in MANIFESTS
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "Pod": lambda d: d["spec"],
        "PodTemplate": lambda d: d["template"]["spec"],
        "DaemonSet": lambda d: d["spec"]["template"]["spec"],
    }[doc["kind"]](doc)
    return spec


def expand(argv: list[str], env: list[dict[str, Any]]) -> list[str]:
    """Kubernetes' $(VAR) expansion in command lines (fieldRefs become a placeholder)."""
    values = {e["name"]: e.get("value", f"<{e['name']}>") for e in env}
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in argv]


def container_argv(spec: dict[str, Any]) -> list[str]:
    (container,) = spec["containers"]
    return expand(container["command"] + container.get("args", []), container.get("env", []))


def host_dirs(spec: dict[str, Any]) -> dict[str, str]:
    """Mount path -> host path, for the hostPath volumes of the (single) container."""
    (container,) = spec["containers"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    return {m["mountPath"]: host[m["name"]] for m in container["volumeMounts"] if m["name"] in host}


def daemon() -> tuple[dict[str, Any], argparse.Namespace]:
    (ds,) = by_kind("DaemonSet")
    spec = pod_spec(ds)
    argv = container_argv(spec)
    assert argv[0] == "fabricd"
    return spec, fabricd_parser().parse_args(argv[1:])


def test_there_are_manifests() -> None:
    kinds = sorted(doc["kind"] for _, doc in documents())
    assert kinds == ["DaemonSet", "Namespace", "Pod", "Pod", "PodTemplate"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_kubernetes(version: str) -> None:
    for name, doc in documents():
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise AssertionError(f"{name} is not valid for Kubernetes {version}: {err}") from err


def test_the_schema_check_rejects_what_kubernetes_would() -> None:
    """The check has teeth: an unknown field and a wrong type are refused."""
    (ds,) = by_kind("DaemonSet")
    typo = copy.deepcopy(ds)
    typo["spec"]["template"]["spec"]["hostNetwrk"] = True
    wrong = copy.deepcopy(ds)
    wrong["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "7471"
    for bad in (typo, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_the_daemon_is_the_node_nic() -> None:
    spec, args = daemon()
    assert spec["hostNetwork"] is True, "peers reach a node's fabricd at the node's address"
    assert args.listen[0] == "0.0.0.0"
    (container,) = spec["containers"]
    assert [p["containerPort"] for p in container["ports"]] == [args.listen[1]]
    dirs = host_dirs(spec)
    assert str(Path(args.socket).parent) in dirs, "the socket must be in a host directory"
    assert SHM in dirs, "the segments consumers create must be in a host directory"
    probe = " ".join(container["readinessProbe"]["exec"]["command"])
    assert args.socket in probe


def test_every_consumer_meets_its_node_daemon() -> None:
    spec, args = daemon()
    daemon_dirs = host_dirs(spec)
    socket_host = daemon_dirs[str(Path(args.socket).parent)]
    consumers = [*by_kind("Pod"), *by_kind("PodTemplate")]
    assert consumers
    for doc in consumers:
        name = doc["metadata"]["name"]
        cspec = pod_spec(doc)
        assert not cspec.get("hostNetwork"), f"{name}: a consumer needs no network of its own"
        dirs = host_dirs(cspec)
        ctl = ctl_parser().parse_args(container_argv(cspec)[1:])
        ia_dir = str(Path(ctl.ia).parent)
        assert dirs.get(ia_dir) == socket_host, f"{name}: --ia is not in the node's socket dir"
        assert Path(ctl.ia).name == Path(args.socket).name, f"{name}: --ia is not fabricd's socket"
        assert dirs.get(SHM) == daemon_dirs[SHM], f"{name}: /dev/shm is not the daemon's"
        env = {e["name"]: e.get("value") for e in cspec["containers"][0].get("env", [])}
        assert env.get("DATFABRIC_SOCKET") == ctl.ia
        if ctl.role == "client":
            host, _, port = ctl.peer.rpartition(":")
            assert host and int(port) == args.listen[1], f"{name}: --peer {ctl.peer}"


def test_consumers_follow_the_template() -> None:
    (template,) = by_kind("PodTemplate")
    want = pod_spec(template)
    for pod in by_kind("Pod"):
        spec = pod_spec(pod)
        assert spec["volumes"] == want["volumes"], pod["metadata"]["name"]
        assert spec["containers"][0]["volumeMounts"] == want["containers"][0]["volumeMounts"]


def test_the_image_is_the_one_tools_containers_builds() -> None:
    from tools.image import IMAGE

    images = {c["image"] for _, doc in documents() if doc["kind"] != "Namespace"
              for c in pod_spec(doc)["containers"]}  # fmt: skip
    assert images == {IMAGE}
