"""The deployment files, checked without a cluster or a container engine.

The Kubernetes manifests are validated against the Kubernetes JSON schemas shipped
by the ``kubernetes-validate`` package (strict: an unknown or misspelt field fails), for
the oldest and the newest Kubernetes version we support. Then what no schema can see:
the pieces agree with each other and with tether — probes on the real health service
names, ports as the server config binds them, the Service selecting the Deployment's
pods, CPU as ``learner_placement()`` splits a node, the image's user and volume. The
compose file has no schema here (none ships on PyPI); its references are checked the
same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.dockerfile import parse
from tests.deploy.repo_files import DEPLOY, ROOT, load_all, load_script
from tether.learning.placement import learner_placement
from tether.serving.config import ServerConfig
from tether.v1 import policy_pb2 as pb

K8S = DEPLOY / "k8s"
POLICY_SERVICE = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name
KUBERNETES_VERSIONS = ("1.28", kubernetes_validate.utils.latest_version())


def manifests() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            docs[doc["kind"]] = doc
    return docs


def server_config() -> ServerConfig:
    return ServerConfig.from_yaml(DEPLOY / "server.yaml")


def container() -> dict[str, Any]:
    (only,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def ports_by_name() -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container()["ports"]}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("kind", ["Deployment", "Service", "PersistentVolumeClaim", "PodDisruptionBudget"])  # fmt: skip
def test_manifest_is_valid_for_kubernetes(kind: str, version: str) -> None:
    kubernetes_validate.validate(manifests()[kind], version, strict=True)


def test_a_misspelt_field_is_caught_by_the_schema_check() -> None:
    broken = manifests()["Deployment"]
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = load_all(K8S / "kustomization.yaml")
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_probes_ask_the_servers_health_service() -> None:
    grpc_port = ports_by_name()["grpc"]
    probes = {name: container()[name]["grpc"] for name in ("startupProbe", "readinessProbe")}
    for probe in probes.values():
        assert probe == {"port": grpc_port, "service": POLICY_SERVICE}
    assert container()["livenessProbe"]["grpc"] == {"port": grpc_port}  # the whole server


def test_ports_are_the_ones_the_image_config_binds() -> None:
    config = server_config()
    assert (config.host, config.metrics_host) == ("0.0.0.0", "0.0.0.0")
    assert ports_by_name() == {"grpc": config.port, "metrics": config.metrics_port}
    annotations = manifests()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(config.metrics_port)
    (final,) = [s for s in parse() if s.name is None]
    assert set(final.last("EXPOSE").words()) == {str(config.port), str(config.metrics_port)}


def test_headless_service_selects_the_server_pods() -> None:
    docs = manifests()
    service, deployment = docs["Service"], docs["Deployment"]
    assert service["spec"]["clusterIP"] == "None"  # DNS answers every ready pod
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(ports_by_name())


def test_cpu_follows_the_learner_placement_split() -> None:
    template = manifests()["Deployment"]["spec"]["template"]
    node_cores = int(template["metadata"]["annotations"]["tether.dev/node-cores"])
    split = learner_placement(tuple(range(node_cores)))
    resources = container()["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS, pinnable
    assert resources["requests"]["cpu"] == str(len(split.serving_cores))
    (threads,) = [e for e in container()["env"] if e["name"] == "OMP_NUM_THREADS"]
    assert threads["valueFrom"]["resourceFieldRef"]["resource"] == "limits.cpu"


def test_shutdown_grace_covers_the_servers_drain() -> None:
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > server_config().grace_s


def test_pod_runs_the_image_as_its_non_root_user_with_the_model_volume() -> None:
    (final,) = [s for s in parse() if s.name is None]
    uid, _, gid = final.last("USER").args.partition(":")
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    context = pod["securityContext"]
    assert (context["runAsNonRoot"], str(context["runAsUser"]), str(context["runAsGroup"])) == (
        True,
        uid,
        gid,
    )
    (volume,) = final.last("VOLUME").exec_form()
    entrypoint = final.last("ENTRYPOINT").exec_form()
    assert entrypoint[entrypoint.index("--model-dir") + 1] == volume
    mounts = {m["name"]: m for m in container()["volumeMounts"]}
    assert mounts["models"]["mountPath"] == volume
    assert mounts["models"]["readOnly"]
    tokens = container()["args"][container()["args"].index("--admin-tokens") + 1]
    assert Path(tokens).parent == Path(mounts["admin-tokens"]["mountPath"])


def test_compose_runs_the_image_with_the_model_volume_and_robots_on_dns() -> None:
    sim_robot = load_script(DEPLOY / "sim_robot.py")
    (compose,) = load_all(ROOT / "compose.yaml")
    server, robot = compose["services"]["server"], compose["services"]["robot"]
    assert server["build"] == "."
    assert any(v.split(":")[1] == "/models" for v in server["volumes"])
    assert robot["image"] == server["image"]
    assert robot["depends_on"]["server"]["condition"] == "service_healthy"
    (final,) = [s for s in parse() if s.name is None]
    script = Path(robot["entrypoint"][-1])
    copied = final.all("COPY")[-1].words()
    assert f"deploy/{script.name}" in copied
    assert copied[-1] == f"{script.parent}/"
    args = sim_robot.parse_args(robot["command"])
    assert args.target == f"dns:///server:{server_config().port}"
    grace = float(server["stop_grace_period"].rstrip("s"))
    assert grace > server_config().grace_s
