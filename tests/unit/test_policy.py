"""The one access predicate (``access.policy``), table by table: no store, no sockets."""

from __future__ import annotations

import pytest

from mlstream.access.keys import ApiKey, Caller
from mlstream.access.policy import (GroupAccess, Owner, group_access, may_manage_group, may_reach_group,
                                    may_see_owned, may_see_task, may_use_model, owner_doc)
from mlstream.access.tenants import DEFAULT, Tenant


def caller(name: str, role: str = "user", tenant: Tenant = DEFAULT, roles: tuple[str, ...] = (),
           models: tuple[str, ...] | None = None) -> Caller:
    return Caller(ApiKey(f"id-{name}", name, role, 0, tenant=tenant.name, backend_roles=roles, models=models), tenant)


TEAM_A = Tenant("team-a", ("m-a", "shared-name"))
TEAM_B = Tenant("team-b", ())
ALICE = caller("alice", tenant=TEAM_A, roles=("analysts",))
LEAD = caller("lead", "tenant_admin", TEAM_A, ("leads",))
BOB = caller("bob", tenant=TEAM_B, roles=("analysts",))
ADMIN = caller("ops", "admin", TEAM_B)
NARROW = caller("narrow", tenant=TEAM_A, models=("m-a",))
WIDE = caller("wide", tenant=TEAM_A, models=("m-a", "m-other"))

PUBLIC = GroupAccess("g1")
UNOWNED_PRIVATE = GroupAccess("g0", "private")  # made while open: no owner, so public
PRIVATE = GroupAccess("g2", "private", "id-lead", "lead", (), "team-a")
RESTRICTED = GroupAccess("g3", "restricted", "id-lead", "lead", ("analysts",), "team-a")


@pytest.mark.parametrize("who, model_id, name, group, allowed", [
    (None, "m-x", "x", PRIVATE, True),                 # an open server
    (ADMIN, "m-x", "x", PRIVATE, True),                # admin: everything
    (ALICE, "m-a", None, PUBLIC, True),                # by id
    (ALICE, "m-1", "shared-name", PUBLIC, True),       # by name
    (ALICE, "m-other", "other", PUBLIC, False),        # not in the tenant's models
    (BOB, "m-a", None, PUBLIC, False),                 # [] is no model
    (NARROW, "m-a", None, PUBLIC, True),
    (NARROW, "m-1", "shared-name", PUBLIC, False),     # the key narrows its tenant
    (WIDE, "m-other", None, PUBLIC, False),            # ... and never widens it
    (ALICE, "m-a", None, UNOWNED_PRIVATE, True),
    (ALICE, "m-a", None, PRIVATE, False),              # private: its owner only
    (LEAD, "m-a", None, PRIVATE, True),
    (ALICE, "m-a", None, RESTRICTED, True),            # shares "analysts"
    (caller("carol", tenant=TEAM_A), "m-a", None, RESTRICTED, False),
    (ALICE, "m-a", None, None, True),                  # a model without a group
])
def test_may_use_model(who, model_id, name, group, allowed):
    assert may_use_model(who, model_id, name, group) is allowed


def test_owner_is_the_key_id_so_a_renamed_key_keeps_its_groups_and_a_reused_name_gets_none():
    group = group_access("g", {"access": "private", "owner": owner_doc(LEAD), "tenant_id": "team-a"})
    assert (group.owner_key_id, group.owner_name, group.tenant) == ("id-lead", "lead", "team-a")
    renamed = Caller(ApiKey("id-lead", "lead-2", "tenant_admin", 0, tenant="team-a"), TEAM_A)
    impostor = Caller(ApiKey("id-other", "lead", "user", 0, tenant="team-a"), TEAM_A)
    assert may_reach_group(renamed, group) and not may_reach_group(impostor, group)


@pytest.mark.parametrize("who, group, allowed", [
    (ADMIN, PRIVATE, True), (LEAD, PRIVATE, True),
    (caller("lead-2", "tenant_admin", TEAM_A), PRIVATE, True),   # a tenant_admin of its tenant
    (caller("lead-b", "tenant_admin", TEAM_B), PRIVATE, False),  # not of another
    (ALICE, RESTRICTED, False),                                  # using is not managing
])
def test_may_manage_group(who, group, allowed):
    assert may_manage_group(who, group) is allowed


A_ALICE, A_OLD, B_BOB = Owner("id-alice", "team-a"), Owner(None, "default"), Owner("id-bob", "team-b")


@pytest.mark.parametrize("who, owner, allowed", [
    (ALICE, A_ALICE, True), (LEAD, A_ALICE, True), (caller("carol", tenant=TEAM_A), A_ALICE, False),
    (BOB, A_ALICE, False), (ADMIN, A_ALICE, True), (None, B_BOB, True),
    (caller("d"), A_OLD, True),      # before tenants: its tenant's keys, as before
    (ALICE, A_OLD, False),
])
def test_may_see_owned(who, owner, allowed):
    assert may_see_owned(who, owner) is allowed


def test_tasks_without_an_owner_are_admins_only():
    assert not may_see_task(caller("d"), {"task_type": "REGISTER_MODEL"})
    assert may_see_task(ADMIN, {"task_type": "REGISTER_MODEL"})
    assert may_see_task(ALICE, {"owner_key_id": "id-alice", "owner_tenant": "team-a"})
    assert not may_see_task(BOB, {"owner_key_id": "id-alice", "owner_tenant": "team-a"})
