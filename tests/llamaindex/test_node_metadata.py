"""Retrieved nodes keep their metadata's key order: LlamaIndex renders a node's metadata into
the LLM's prompt key by key, in the dict's order, and the run log's JSON does not keep it."""

from __future__ import annotations

from pathlib import Path

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.query_engine import RetrieverQueryEngine

from agentreplay_core import Store
from agentreplay_llamaindex import ReplayLLM, ReplayRetriever, instrument
from tests.llamaindex.models import HashEmbedding, SampledLLM


def test_a_rag_prompt_over_loaded_files_replays_with_the_metadata_in_order(
        li_store: Store, tmp_path: Path) -> None:
    for name, text in (("rent.txt", "The rent is due on the first."),
                       ("keys.txt", "Keys are with the porter.")):
        (tmp_path / name).write_text(text)
    # file_path, file_name, file_type, file_size, creation_date, ...: not in sorted order
    documents = SimpleDirectoryReader(str(tmp_path)).load_data()
    keys = list(documents[0].metadata)
    assert keys != sorted(keys)
    index = VectorStoreIndex.from_documents(documents, embed_model=HashEmbedding())
    with li_store.record(name="files") as rec, instrument(rec):
        live = str(index.as_query_engine(llm=SampledLLM(), similarity_top_k=2)
                   .query("when is the rent due?"))
    [retrieval] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "retriever"]
    # the prompt the model got lists each file's metadata in the reader's order
    [llm] = [s for s in li_store.load_steps(rec.run_id) if s.kind == "llm"]
    assert f"{keys[0]}: " in str(llm.input)
    with li_store.replay(rec.run_id) as player, instrument(player):
        engine = RetrieverQueryEngine.from_args(ReplayRetriever(player), llm=ReplayLLM(player))
        again = engine.query("when is the rent due?")
    assert str(again) == live
    assert [list(n.node.metadata) for n in again.source_nodes] == [keys, keys]
    assert all(item["order"] for item in retrieval.output)
