"""The seal's key in its Secret against the fake API server: made when missing, filled in
once by whichever replica wins, rotated, lost — and without it nothing is written or
removed, and the wait is said."""

import base64
from datetime import timedelta

from prometheus_client import REGISTRY

from test_receipt_controller import NS, RR, Setup, finish, job_ran, sealed_receipt
from trainwarden.api.v1alpha1.names import SEAL
from trainwarden.receipts.identity import MIN_KEY, Keyring, key_id
from trainwarden.receipts.ledger import load_keyring
from trainwarden.receipts.reconcile import ReceiptSettings
from trainwarden.testing.builders import NamespaceBuilder
from world import JSON, World, run

SECRET = ReceiptSettings().seal


def secret(data: dict[str, bytes]) -> JSON:
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    meta = {"name": SECRET[1], "namespace": SECRET[0]}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": encoded,
    }


def stored_key(world: World) -> bytes:
    found = world.fake.read("v1", "Secret", *SECRET)
    assert found is not None
    return base64.b64decode(found["data"]["key"])


def test_without_its_secret_the_operator_makes_one_with_a_random_key() -> None:
    """`trainwarden run` with an admin's kubeconfig: nothing to install first."""
    world = World()
    ring = run(load_keyring(world.fake, *SECRET))
    assert isinstance(ring, Keyring)
    assert len(ring.current) == MIN_KEY
    assert ring.current == stored_key(world)
    assert run(load_keyring(world.fake, *SECRET)) == ring  # read, not made again


def test_the_chart_s_empty_secret_is_filled_once_and_a_replica_that_lost_reads_the_winner_s() -> (
    None
):
    world = World()
    world.fake.put(secret({}))
    winner = b"w" * MIN_KEY

    def other_replica_first(fake: object) -> None:
        world.fake.edit(
            "v1", "Secret", *SECRET, {"data": {"key": base64.b64encode(winner).decode()}}
        )

    world.fake.on_next("patch", "Secret", other_replica_first)
    ring = run(load_keyring(world.fake, *SECRET))
    assert ring == Keyring(winner)
    patches = [w for w in world.fake.writes if w.kind == "Secret"]
    assert [w.outcome for w in patches] == ["Conflict"]  # its own patch lost: never overwrote
    assert patches[0].body["metadata"]["resourceVersion"]


def test_without_the_key_no_receipt_is_written_and_the_wait_is_said() -> None:
    """The chart's role may not create Secrets: with its Secret deleted, runs wait (no
    receipt that could not be told from a forgery) until it is back."""
    world = World()
    world.put(NamespaceBuilder(NS).build())
    world.fake.forbid("v1", "Secret", "create")
    setup = Setup(world)
    finish(world, job_ran(world))
    setup.process()
    assert setup.receipts() == []
    assert REGISTRY.get_sample_value("trainwarden_run_receipt_seal_ready") == 0.0
    assert setup.controller.closing, "the run still waits"
    world.fake.put(secret({}))  # helm upgrade: the chart's Secret again
    world.advance(61)
    setup.process()
    (receipt,) = setup.receipts()
    assert receipt["metadata"]["annotations"][SEAL].startswith(key_id(stored_key(world)) + ".")
    assert REGISTRY.get_sample_value("trainwarden_run_receipt_seal_ready") == 1.0


def test_a_rotated_key_keeps_its_receipts_the_operator_s_and_a_lost_one_lets_go_of_them() -> None:
    """Rotation: the old key moved to a `retired-*` entry, a new one made; receipts sealed
    with the old key still count and expire. A key lost with its Secret: the receipts it
    sealed are neither believed nor removed (people remove them, by the label naming the
    lost key's id)."""
    world = World()
    world.put(NamespaceBuilder(NS).build())
    old, lost = b"o" * MIN_KEY, b"l" * MIN_KEY
    world.fake.put(secret({"key": lost}))
    sealed_receipt(world, "sealed-by-lost", timedelta(days=200), None)
    world.fake.put(secret({"key": old}))
    sealed_receipt(world, "sealed-by-old", timedelta(days=200), None)
    world.fake.put(secret({"retired-1": old}))  # the new key is the operator's to make
    setup = Setup(world)
    finish(world, job_ran(world))
    setup.process()
    names = sorted(o["metadata"]["name"] for o in setup.receipts())
    assert names == ["job-train-00000000", "sealed-by-lost"]  # the old one expired (TTL)
    new = stored_key(world)
    assert new not in (old, lost)
    written = world.read(*RR, NS, "job-train-00000000")
    assert written["metadata"]["labels"]["trainwarden.dev/seal-key"] == key_id(new)
    lost_one = world.read(*RR, NS, "sealed-by-lost")
    assert lost_one["metadata"]["labels"]["trainwarden.dev/seal-key"] == key_id(lost)
