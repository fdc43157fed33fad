"""Tokens, keys and what a key may do."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.permissions import (
    ADMIN_AUDIT,
    ADMIN_WORKERS,
    ALL,
    LEVEL_PERMISSIONS,
    METRICS_READ,
    PERMISSION_HELP,
    PERMISSIONS,
    QUEUE_APPROVE,
    QUEUE_READ,
    QUEUE_SUBMIT,
    allows,
    check_permissions,
    effective_permissions,
)
from gpufleet.domain.policy import Level
from gpufleet.domain.secrets import (
    API_KEY_PREFIX,
    WORKER_TOKEN_PREFIX,
    check_upload_token,
    hash_secret,
    new_api_key,
    new_id,
    new_worker_token,
    open_ticket,
    same_hash,
    sign_ticket,
    upload_token,
)
from gpufleet.errors import InvalidInput

URLSAFE = re.compile(r"^[A-Za-z0-9_-]+$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
NAMED = sorted(PERMISSIONS - {ALL})

# ---- tokens and keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "prefix"), [(new_worker_token, "wt_"), (new_api_key, "gfk_")], ids=["token", "key"]
)
def test_a_new_secret_carries_its_prefix_and_32_random_bytes(make, prefix):
    secret = make()
    assert secret.startswith(prefix)
    body = secret.removeprefix(prefix)
    assert len(body) >= 43  # url-safe base64 of 32 bytes, unpadded
    assert URLSAFE.match(body)
    assert len(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))) >= 32


def test_the_prefixes_tell_worker_tokens_from_api_keys():
    assert WORKER_TOKEN_PREFIX == "wt_"
    assert API_KEY_PREFIX == "gfk_"
    assert not new_worker_token().startswith(API_KEY_PREFIX)
    assert not new_api_key().startswith(WORKER_TOKEN_PREFIX)


@pytest.mark.parametrize("make", [new_worker_token, new_api_key], ids=["token", "key"])
def test_new_secrets_do_not_repeat(make):
    assert len({make() for _ in range(200)}) == 200


@settings(max_examples=200)
@given(secret=st.text())
def test_a_secret_is_stored_as_64_hex_characters_of_sha256(secret):
    digest = hash_secret(secret)
    assert HEX64.match(digest)
    assert digest == hashlib.sha256(secret.encode()).hexdigest()


def test_hashing_is_stable_and_does_not_contain_the_secret():
    token = new_worker_token()
    assert hash_secret(token) == hash_secret(token)
    assert token not in hash_secret(token)


@settings(max_examples=200)
@given(secret=st.text(min_size=1), other=st.text(min_size=1))
def test_a_stored_hash_matches_only_the_secret_it_was_made_from(secret, other):
    stored = hash_secret(secret)
    assert same_hash(stored, secret)
    assert same_hash(stored, other) is (other == secret)


def test_a_token_one_character_off_does_not_match():
    token = new_worker_token()
    stored = hash_secret(token)
    assert not same_hash(stored, token[:-1])
    assert not same_hash(stored, token + "x")
    assert not same_hash(stored, "WT_" + token.removeprefix("wt_"))


def test_a_hash_is_not_accepted_in_place_of_the_token():
    token = new_worker_token()
    stored = hash_secret(token)
    assert not same_hash(stored, stored)


@pytest.mark.parametrize("prefix", ["w", "j", "a", "key"])
def test_a_new_id_is_its_prefix_and_twelve_hex_digits(prefix):
    assert re.fullmatch(rf"{prefix}_[0-9a-f]{{12}}", new_id(prefix))


# ---- permissions ----------------------------------------------------------------------------


def test_the_permissions_are_the_six_named_ones_and_the_wildcard():
    named = {ADMIN_WORKERS, ADMIN_AUDIT, QUEUE_SUBMIT, QUEUE_READ, QUEUE_APPROVE, METRICS_READ}
    assert named | {ALL} == PERMISSIONS
    assert ALL == "*"
    assert QUEUE_APPROVE == "queue.approve"
    assert PERMISSION_HELP[QUEUE_APPROVE] == "approve or reject jobs waiting for approval"


def test_each_level_may_do_what_the_contract_names():
    assert {
        Level.ADMIN: {ALL},
        Level.LEAD: {QUEUE_READ, QUEUE_SUBMIT, QUEUE_APPROVE, METRICS_READ},
        Level.RESEARCHER: {QUEUE_READ, QUEUE_SUBMIT},
        Level.VIEWER: {QUEUE_READ, QUEUE_SUBMIT},
    } == LEVEL_PERMISSIONS
    assert all(LEVEL_PERMISSIONS[level] <= PERMISSIONS for level in Level)


@given(key=st.sets(st.sampled_from(sorted(PERMISSIONS))), level=st.sampled_from(list(Level)))
def test_a_key_may_do_only_what_both_it_and_its_users_level_allow(key, level):
    effective = effective_permissions(key, level)
    for needed in NAMED:
        both = allows(key, needed) and allows(LEVEL_PERMISSIONS[level], needed)
        assert allows(effective, needed) is both


def test_the_wildcard_on_either_side_stands_for_the_other_side():
    assert effective_permissions([ALL], Level.RESEARCHER) == {QUEUE_READ, QUEUE_SUBMIT}
    assert effective_permissions([ADMIN_AUDIT], Level.ADMIN) == {ADMIN_AUDIT}
    assert effective_permissions([ALL], Level.ADMIN) == {ALL}
    assert effective_permissions([ADMIN_WORKERS, QUEUE_READ], Level.LEAD) == {QUEUE_READ}


@given(needed=st.sampled_from(NAMED) | st.text())
def test_the_wildcard_allows_everything(needed):
    assert allows([ALL], needed)
    assert allows({QUEUE_READ, ALL}, needed)


@given(granted=st.sets(st.sampled_from(NAMED)), needed=st.sampled_from(NAMED))
def test_without_the_wildcard_only_granted_permissions_are_allowed(granted, needed):
    assert allows(granted, needed) is (needed in granted)


def test_no_permissions_allow_nothing():
    assert not any(allows([], p) for p in PERMISSIONS)


def test_granted_permissions_may_come_from_any_iterable():
    assert allows(iter([QUEUE_READ, QUEUE_SUBMIT]), QUEUE_SUBMIT)
    assert not allows((p for p in [QUEUE_READ]), ADMIN_WORKERS)


@given(requested=st.lists(st.sampled_from(sorted(PERMISSIONS)), min_size=1))
def test_valid_permissions_come_back_sorted_without_repeats(requested):
    assert check_permissions(requested) == sorted(set(requested))


@given(
    known=st.lists(st.sampled_from(sorted(PERMISSIONS))),
    unknown=st.lists(st.text(min_size=1).filter(lambda p: p not in PERMISSIONS), min_size=1),
)
def test_an_unknown_permission_is_refused_with_the_valid_ones_listed(known, unknown):
    with pytest.raises(InvalidInput) as info:
        check_permissions(known + unknown)
    message = info.value.message
    assert message.startswith(f"unknown permission(s) {', '.join(sorted(set(unknown)))};")
    assert message.endswith("choose from " + ", ".join(sorted(PERMISSIONS)))


def test_a_misspelt_permission_names_itself_and_every_valid_choice():
    with pytest.raises(InvalidInput) as info:
        check_permissions(["queue.submit", "queue.raed"])
    assert info.value.message == (
        "unknown permission(s) queue.raed; "
        "choose from *, admin.audit, admin.workers, metrics.read, queue.approve, queue.read, "
        "queue.submit"
    )


def test_a_key_without_permissions_is_refused():
    with pytest.raises(InvalidInput, match="at least one permission"):
        check_permissions([])


# ---- per-attempt upload tokens and signed upload tickets ---------------------------------------

MASTER = b"k" * 32


@settings(max_examples=50)
@given(a=st.text(min_size=1, max_size=40), b=st.text(min_size=1, max_size=40))
def test_an_upload_token_opens_its_own_attempt_only(a, b):
    token = upload_token(MASTER, a)
    assert token.startswith("ut_") and URLSAFE.match(token[3:])
    assert token == upload_token(MASTER, a)  # derived again on every resend, nothing stored
    assert check_upload_token(MASTER, a, token)
    assert check_upload_token(MASTER, b, token) == (a == b)
    assert not check_upload_token(b"other key" * 4, a, token)


@settings(max_examples=50)
@given(payload=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=20)))
def test_a_signed_ticket_opens_to_its_payload_under_its_key_and_purpose_only(payload):
    payload = {k: v for k, v in payload.items() if not isinstance(v, int) or abs(v) < 2**63}
    ticket = sign_ticket(MASTER, "upload", payload)
    assert open_ticket(MASTER, "upload", ticket) == payload
    assert open_ticket(MASTER, "other", ticket) is None
    assert open_ticket(b"x" * 32, "upload", ticket) is None


@given(position=st.integers(min_value=0), char=st.sampled_from("AB_-.x="))
def test_a_ticket_changed_anywhere_does_not_open(position, char):
    ticket = sign_ticket(MASTER, "upload", {"p": "output/model.bin", "s": 10})
    i = position % len(ticket)
    changed = ticket[:i] + char + ticket[i + 1 :]
    if changed != ticket:
        assert open_ticket(MASTER, "upload", changed) is None


@pytest.mark.parametrize("junk", ["", ".", "a.", ".b", "no-dot", "é.é", "a.b.c", "\x00.\x00"])
def test_junk_is_no_ticket(junk):
    assert open_ticket(MASTER, "upload", junk) is None
