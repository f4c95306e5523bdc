"""The Kubernetes manifests: the collector is a native sidecar that sees the trainer's traces
and reaches the aggregator's Service."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploycheck import DEPLOY, FLAGS, REQUIRED, require_tool

K8S = DEPLOY / "kubernetes"
TRAINING = K8S / "training-pod.yaml"
AGGREGATOR = K8S / "aggregator.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def one(path: Path, kind: str, name_prefix: str = "") -> dict[str, Any]:
    (doc,) = [
        d
        for d in documents(path)
        if d["kind"] == kind and d["metadata"]["name"].startswith(name_prefix)
    ]
    return doc


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]
    return spec["template"]["spec"] if "template" in spec else spec


def training_pod() -> dict[str, Any]:
    (workload,) = [d for d in documents(TRAINING) if d["kind"] in {"Pod", "Job"}]
    return pod_spec(workload)


def container(spec: dict[str, Any], name: str, field: str = "containers") -> dict[str, Any]:
    (c,) = [c for c in spec.get(field, []) if c["name"] == name]
    return c


def collector() -> dict[str, Any]:
    return container(training_pod(), "commscope-collector", "initContainers")


def argv(c: dict[str, Any]) -> list[str]:
    return [*c.get("command", []), *c.get("args", [])]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def mount_of(c: dict[str, Any], volume: str) -> str:
    (path,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == volume]
    return str(path)


def test_collector_is_a_native_sidecar() -> None:
    spec = training_pod()
    assert collector()["restartPolicy"] == "Always"
    assert "commscope-collector" not in {c["name"] for c in spec["containers"]}


def test_trainer_and_collector_share_an_emptydir_at_one_path() -> None:
    spec = training_pod()
    trainer = container(spec, "trainer")
    empty = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    shared = {m["name"] for m in trainer["volumeMounts"]} & {
        m["name"] for m in collector()["volumeMounts"]
    }
    (traces,) = [v for v in shared if v in empty]
    assert mount_of(trainer, traces) == mount_of(collector(), traces)


def test_collector_watches_the_shared_folder() -> None:
    spec = training_pod()
    trainer = container(spec, "trainer")
    args = argv(collector())
    watch = flag(args, "--watch")
    assert any(m["mountPath"] == watch for m in trainer["volumeMounts"])
    # TorchTitan writes <dump_folder>/<save_traces_folder>/iteration_N: that is the watch folder.
    targs = argv(trainer)
    dump = next(a.split("=", 1)[1] for a in targs if a.startswith("--job.dump_folder="))
    sub = next(a.split("=", 1)[1] for a in targs if a.startswith("--profiling.save_traces_folder="))
    assert watch == f"{dump}/{sub}"


def test_collector_runs_collect_with_known_flags() -> None:
    args = argv(collector())
    assert args[:2] == ["commscope", "collect"]
    flags = {a for a in args if a.startswith("--")}
    assert REQUIRED["collect"] <= flags <= FLAGS["collect"]


INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def test_collector_node_name_is_the_job_name_and_completion_index() -> None:
    """Unique per pod and known ahead, so each node's key pair can be made before the job."""
    c = collector()
    node = flag(argv(c), "--node")
    match = re.fullmatch(r"(.+)-\$\((\w+)\)", node)
    assert match and match[1] == "llama3-8b"
    (env,) = [e for e in c["env"] if e["name"] == match[2]]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == INDEX
    (workload,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    assert workload["metadata"]["name"] == match[1]
    assert workload["spec"]["completionMode"] == "Indexed"


def secret_mount(spec: dict[str, Any], c: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mounted (read-only) at the folder holding `path`."""
    (mount,) = [m for m in c["volumeMounts"] if f"{path}/".startswith(f"{m['mountPath']}/")]
    assert mount.get("readOnly") is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume


def test_collector_keys_come_from_a_secret_readable_by_its_group_only() -> None:
    spec, args = training_pod(), argv(collector())
    keys = secret_mount(spec, collector(), flag(args, "--keys"))
    assert keys["secret"]["defaultMode"] == 0o440
    assert spec["securityContext"]["fsGroup"] == collector()["securityContext"]["runAsGroup"]
    assert flag(args, "--server-key") == f"{flag(args, '--keys')}/aggregator.key"


def test_aggregator_keys_come_from_a_secret_and_the_allow_list_from_a_configmap() -> None:
    (workload,) = [d for d in documents(AGGREGATOR) if d["kind"] == "Job"]
    spec = pod_spec(workload)
    (agg,) = spec["containers"]
    args = argv(agg)
    assert secret_mount(spec, agg, flag(args, "--keys"))["secret"]["defaultMode"] == 0o440
    assert "configMap" in secret_mount(spec, agg, flag(args, "--allow"))


def test_the_documented_kubectl_commands_make_what_the_manifests_mount() -> None:
    text = AGGREGATOR.read_text(encoding="utf-8")
    made = set(re.findall(r"create (?:secret generic|configmap) ([\w-]+)", text))
    mounted = set()
    for path in (TRAINING, AGGREGATOR):
        for doc in documents(path):
            if doc["kind"] == "Job":
                for v in pod_spec(doc)["volumes"]:
                    ref = v.get("secret", {}).get("secretName") or v.get("configMap", {}).get(
                        "name"
                    )
                    if ref and ("keys" in ref or "allow" in ref):
                        mounted.add(ref)
    assert made == mounted
    (train_job,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    for index in range(train_job["spec"]["completions"]):
        assert f"keys/llama3-8b-{index}.key_secret" in text  # in the collectors' Secret
        assert f"keys/llama3-8b-{index}.key " in text or f"keys/llama3-8b-{index}.key\n" in text


def test_collector_state_is_on_a_volume() -> None:
    spec = training_pod()
    state = flag(argv(collector()), "--state")
    volume = next(m["name"] for m in collector()["volumeMounts"] if m["mountPath"] == state)
    assert volume in {v["name"] for v in spec["volumes"]}


def test_collector_reaches_the_aggregator_service_on_5555() -> None:
    service = one(AGGREGATOR, "Service")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    endpoint = flag(argv(collector()), "--aggregator")
    assert endpoint.startswith("tcp://")
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    assert port == "5555"
    assert host in {
        name,
        f"{name}.{namespace}",
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.cluster.local",
    }


def test_sidecar_has_time_to_drain() -> None:
    """The pod's grace period bounds the collector's drain after SIGTERM."""
    assert training_pod()["terminationGracePeriodSeconds"] >= 60


def test_service_exposes_zmq_and_metrics_and_is_scraped() -> None:
    service = one(AGGREGATOR, "Service")
    assert {p["port"] for p in service["spec"]["ports"]} == {5555, 9464}
    notes = service["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert notes["prometheus.io/port"] == "9464"


def test_service_selects_the_aggregator_pod_and_its_ports() -> None:
    service = one(AGGREGATOR, "Service")
    (workload,) = [d for d in documents(AGGREGATOR) if d["kind"] in {"Job", "Deployment"}]
    template = workload["spec"]["template"]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    for port in service["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"]


def test_aggregator_listens_serves_metrics_and_keeps_state_on_volumes() -> None:
    (workload,) = [d for d in documents(AGGREGATOR) if d["kind"] in {"Job", "Deployment"}]
    spec = pod_spec(workload)
    (agg,) = spec["containers"]
    args = argv(agg)
    assert args[:2] == ["commscope", "aggregate"]
    assert REQUIRED["aggregate"] <= {a for a in args if a.startswith("--")} <= FLAGS["aggregate"]
    assert flag(args, "--listen") == "tcp://0.0.0.0:5555"
    assert flag(args, "--metrics-port") == "9464"
    volumes = {v["name"] for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in agg["volumeMounts"]}
    for name in ("--state", "--out"):
        assert mounts[flag(args, name)] in volumes


def test_aggregator_expects_as_many_nodes_as_the_training_job_has_pods() -> None:
    (agg_job,) = [d for d in documents(AGGREGATOR) if d["kind"] == "Job"]
    (train_job,) = [d for d in documents(TRAINING) if d["kind"] == "Job"]
    args = argv(pod_spec(agg_job)["containers"][0])
    assert int(flag(args, "--expect-nodes")) == train_job["spec"]["parallelism"]


def test_volumes_referenced_by_mounts_exist() -> None:
    for path in (TRAINING, AGGREGATOR):
        for doc in documents(path):
            if doc["kind"] not in {"Job", "Pod", "Deployment"}:
                continue
            spec = pod_spec(doc)
            volumes = {v["name"] for v in spec["volumes"]}
            for c in spec["containers"] + spec.get("initContainers", []):
                assert {m["name"] for m in c.get("volumeMounts", [])} <= volumes, c["name"]


def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("kubectl"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("path", [TRAINING, AGGREGATOR], ids=lambda p: p.name)
def test_kubectl_reads_every_object_offline(path: Path) -> None:
    """`--local` decodes each object without a server. (No schema validation: `kubectl apply
    --dry-run=client` still asks an API server for discovery, so it cannot run here.)"""
    done = kubectl("label", "--local", "-f", str(path), "commscope-check=1", "-o", "name")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == len(documents(path))
