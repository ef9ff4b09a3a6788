"""A Python client of holdfast.v1.Runs with nothing but .proto files: its modules are
generated at start with grpc_tools.protoc (Debian's python3-grpc-tools) from the repo's
proto/ and from the standard health and reflection protos, then it checks health, lists
the services by reflection, submits a run, watches it to its end and gets it.

    python3 durable_client.py 127.0.0.1:4144 echo '{"text": "hello"}' \\
        --proto proto --health-proto health.proto --reflection-proto reflection.proto

The control token, when the scheduler wants one, is read from HOLDFAST_CONTROL__TOKEN.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def protoc(out, include, *files):
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{include}",
         f"--python_out={out}", f"--grpc_python_out={out}", *files],
        check=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", help="the scheduler's gRPC host:port")
    parser.add_argument("agent")
    parser.add_argument("input_json")
    parser.add_argument("--proto", required=True, help="the repo's proto/ directory")
    parser.add_argument("--health-proto", required=True, help="grpc/health/v1/health.proto")
    parser.add_argument("--reflection-proto", required=True, help="grpc/reflection/v1/reflection.proto")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="holdfast-python-") as out:
        protoc(out, args.proto, "holdfast/runs/v1/runs.proto", "holdfast/events/v1/events.proto")
        # Generated from their own directory, as top-level modules: under its proto path the
        # reflection module would be grpc.reflection.v1, which the grpc package shadows.
        for proto in (args.health_proto, args.reflection_proto):
            protoc(out, Path(proto).parent, Path(proto).name)
        sys.path.insert(0, out)
        session(args)


def session(args):
    import grpc
    import health_pb2, health_pb2_grpc
    import reflection_pb2, reflection_pb2_grpc
    from holdfast.runs.v1 import runs_pb2, runs_pb2_grpc

    token = os.environ.get("HOLDFAST_CONTROL__TOKEN")
    metadata = [("authorization", f"Bearer {token}")] if token else None
    with grpc.insecure_channel(args.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "holdfast.v1.Runs"):
            status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
            print(f"health {service or '(server)'}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")

        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        for answer in reflection.ServerReflectionInfo(iter([ask]), timeout=10):
            print("services:", ", ".join(sorted(s.name for s in answer.list_services_response.service)))

        runs = runs_pb2_grpc.RunsStub(channel)
        submitted = runs.Submit(
            runs_pb2.SubmitRunRequest(agent=args.agent, input_json=args.input_json),
            timeout=10, metadata=metadata,
        )
        run_id = submitted.run.run_id
        print("submitted:", run_id)
        for event in runs.Watch(runs_pb2.WatchRunRequest(run_id=run_id), timeout=60, metadata=metadata):
            print(f"event {event.sequence}: {event.type}")
        run = runs.Get(runs_pb2.GetDurableRunRequest(run_id=run_id), timeout=10, metadata=metadata)
        print("status:", runs_pb2.DurableStatus.Name(run.status))
        print("output:", run.output_json)


if __name__ == "__main__":
    main()
