"""Stop-word indices on both store backends: OpenSearch's answers, _bulk's parsing and
item errors, percolation, and that bad input changes nothing."""

from __future__ import annotations

import pytest

from mlstream.errors import BadRequest, IndexExists, IndexNotFound, InvalidIndexName, MapperParsing, VersionConflict
from mlstream.guard.stopwords import MAX_DOCUMENTS_PER_INDEX, StopWordIndices, check_index_name, parse_bulk

from ..support.stores import StoreFactory, wait_for_counter_move
from ..support.timeouts import HANG_GUARD

MAPPINGS = {"properties": {"title": {"type": "text"}, "query": {"type": "percolator"}}}


def phrase(text: str) -> dict:
    return {"query": {"query_string": {"query": f'title: "{text}"'}}}


@pytest.fixture
def indices(make_store: StoreFactory) -> StopWordIndices:
    indices = StopWordIndices(make_store())
    indices.create_index("words0", {"mappings": MAPPINGS})
    return indices


def test_the_tutorial_walkthrough(indices):
    assert indices.put_document("words0", "1", {"query": {"query_string": {"query": "title: blacklist"}}}) == (
        201, {"_index": "words0", "_id": "1", "_version": 1, "result": "created",
              "_shards": {"total": 2, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1})
    status, answer = indices.put_document("words0", "2", phrase("Master slave architecture"))
    assert status == 201 and answer["_seq_no"] == 1
    assert indices.percolate("words0", ("title",), "no blacklist here")
    assert indices.percolate("words0", ("title",), "the master slave architecture")
    assert not indices.percolate("words0", ("title",), "a clean text")
    assert not indices.percolate("words0", ("other",), "no blacklist here")  # the field is what is matched


def test_documents_are_versioned_read_and_deleted(indices):
    indices.put_document("words0", "1", phrase("a b"))
    status, answer = indices.put_document("words0", "1", phrase("c d"))
    assert status == 200 and answer["result"] == "updated" and answer["_version"] == 2
    assert indices.get_document("words0", "1") == (200, {
        "_index": "words0", "_id": "1", "_version": 2, "_seq_no": 1, "_primary_term": 1, "found": True,
        "_source": phrase("c d")})
    assert indices.get_document("words0", "9") == (404, {"_index": "words0", "_id": "9", "found": False})
    assert indices.percolate("words0", ("title",), "c d") and not indices.percolate("words0", ("title",), "a b")
    status, answer = indices.delete_document("words0", "1")
    assert status == 200 and answer["result"] == "deleted" and answer["_version"] == 3
    assert indices.delete_document("words0", "1")[0] == 404
    assert not indices.percolate("words0", ("title",), "c d")
    with pytest.raises(VersionConflict):
        indices.put_document("words0", "2", phrase("x"))
        indices.put_document("words0", "2", phrase("x"), create=True)


def test_index_answers_and_errors(indices):
    with pytest.raises(IndexExists, match=r"index \[words0/.+\] already exists"):
        indices.create_index("words0", {})
    got = indices.get_index("words0")["words0"]
    assert got["mappings"] == MAPPINGS and got["settings"]["index"]["provided_name"] == "words0"
    assert indices.delete_index("words0") == {"acknowledged": True}
    with pytest.raises(IndexNotFound, match=r"no such index \[words0\]"):
        indices.get_index("words0")
    with pytest.raises(IndexNotFound):
        indices.percolate("words0", ("title",), "x")  # a guardrail then fails closed
    with pytest.raises(BadRequest, match="unknown key \\[aliasez\\]"):
        indices.create_index("x", {"aliasez": {}})


@pytest.mark.parametrize("name, words", [
    ("Words", "must be lowercase"), ("a b", "must not contain"), ("a:b", "must not contain"),
    ("_bulk", "must not start with"), ("-a", "must not start with"), ("..", "must not be"),
    (".plugins-ml-model", "no hidden or system indices"), ("v1", "mlstream's own routes"),
    ("healthz", "mlstream's own routes"), ("", "must not be empty"), ("a" * 256, "too long"),
])
def test_index_names(name, words):
    with pytest.raises(InvalidIndexName) as refused:
        check_index_name(name)
    assert words in refused.value.reason


def test_writing_to_a_missing_index_creates_it_with_dynamic_mappings(indices):
    assert indices.put_document("auto", None, {"title": "x"})[0] == 201
    with pytest.raises(BadRequest, match="not of type \\[percolator\\]"):
        indices.percolate("auto", ("title",), "x")  # nothing to percolate: the guardrail fails closed


def test_a_stored_query_that_cannot_be_read_is_refused_and_not_stored(indices):
    with pytest.raises(MapperParsing, match="failed to parse field \\[query\\] of type \\[percolator\\]"):
        indices.put_document("words0", "1", {"query": {"range": {"n": {"gt": 1}}}})
    assert indices.get_document("words0", "1")[0] == 404
    with pytest.raises(MapperParsing):
        indices.put_document("words0", "1", ["not", "an", "object"])


def test_bulk_items_and_item_errors(indices):
    body = (b'{"index": {"_index": "words0", "_id": "1"}}\n' + b'{"query": {"match": {"title": "stop"}}}\n'
            b'{"create": {"_id": "1"}}\n{"query": {"match": {"title": "stop"}}}\n'
            b'{"index": {"_index": "v1"}}\n{"a": 1}\n'
            b'{"index": {}}\n{"query": {"nope": {}}}\n'
            b'{"delete": {"_id": "1"}}\n'
            b'{"delete": {"_id": "2"}}\n')
    answer = indices.bulk("words0", body)
    assert answer["errors"] is True
    items = [(next(iter(i)), next(iter(i.values()))) for i in answer["items"]]
    assert [(action, item["status"]) for action, item in items] == [
        ("index", 201), ("create", 409), ("index", 400), ("index", 400), ("delete", 200), ("delete", 404)]
    assert items[1][1]["error"]["type"] == "version_conflict_engine_exception"
    assert items[2][1]["error"]["type"] == "invalid_index_name_exception"
    assert items[3][1]["error"]["type"] == "mapper_parsing_exception"


@pytest.mark.parametrize("body, words", [
    (b"", "request body is required"),
    (b'{"index": {}}\n{"a": 1}', "terminated by a newline"),
    (b'{"index": {"_index": "a"}}\n', "has no source line"),
    (b'not json\n', "Malformed action/metadata line [1]"),
    (b'{"update": {"_id": "1"}}\n{"doc": {}}\n', "not [update]"),
    (b'{"upsert": {}}\n', "expected field [create], [delete], [index] or [update] but found [upsert]"),
    (b'{"index": {}}\n{"a": 1}\n', "index is missing"),
    (b'{"delete": {"_index": "a"}}\n', "id is missing"),
    (b'\n\n', "request body is required"),
])
def test_malformed_bulk_is_refused_whole(body, words):
    with pytest.raises(BadRequest) as refused:
        parse_bulk(body, None)
    assert words in refused.value.reason


def test_malformed_bulk_changes_nothing(indices):
    with pytest.raises(BadRequest):
        indices.bulk("words0", b'{"index": {"_id": "1"}}\n{"query": {"match": {"title": "x"}}}\n{"oops"\n')
    assert indices.get_document("words0", "1")[0] == 404


def test_an_index_is_bounded(indices, monkeypatch):
    monkeypatch.setattr("mlstream.guard.stopwords.MAX_DOCUMENTS_PER_INDEX", 2)
    indices.put_document("words0", "1", phrase("a"))
    indices.put_document("words0", "2", phrase("b"))
    indices.put_document("words0", "2", phrase("c"))  # a replacement adds nothing
    with pytest.raises(BadRequest, match="holds 2 documents"):
        indices.put_document("words0", "3", phrase("d"))
    assert MAX_DOCUMENTS_PER_INDEX >= 1000


def test_another_instance_sees_the_change(make_store: StoreFactory):
    """Two servers on one store: the percolation cache follows the store's change counter."""
    first = StopWordIndices(make_store())
    second_store = make_store()
    second = StopWordIndices(second_store)
    first.create_index("w", {"mappings": MAPPINGS})
    assert not second.percolate("w", ("title",), "stop word")
    before = second_store.change_counter()
    first.put_document("w", "1", phrase("stop word"))
    assert wait_for_counter_move(second_store, before, HANG_GUARD)
    assert second.percolate("w", ("title",), "stop word")
