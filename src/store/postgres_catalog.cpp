// The PostgreSQL Store's catalog tables (declared in store/postgres_store.h): snapshots, the model
// registry, evaluations, endpoints, comparisons, scoring bundles and run lineage.
#include "store/postgres_store.h"

namespace trainer::store::postgres {
namespace {

std::string text_of(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

// ---- snapshots
Status PostgresStore::insert_snapshot(const json& doc) {
  const std::string id = doc.at("snapshotId").get<std::string>();
  const Params p = Params()
                       .text(id)
                       .text(doc.at("runId").get<std::string>())
                       .integer(doc.at("savedStep").get<int64_t>())
                       .text(doc.at("state").get<std::string>())
                       .text(text_of(doc));
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO snapshots(id, run_id, step, state, doc) VALUES ($1, $2, $3, $4, $5) "
                    "ON CONFLICT (id) DO NOTHING",
                    p, "inserting snapshot"));
    if (r.changed() == 0) return already_exists("snapshot " + id + " is already in the catalog");
    return Status::ok();
  });
}

Status PostgresStore::update_snapshot(const json& doc) {
  const std::string id = doc.at("snapshotId").get<std::string>();
  const Params p{doc.at("state").get<std::string>(), text_of(doc), id};
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("UPDATE snapshots SET state = $1, doc = $2 WHERE id = $3", p, "updating snapshot"));
    if (r.changed() == 0) return not_found("snapshot " + id);
    return Status::ok();
  });
}

Result<std::optional<json>> PostgresStore::get_snapshot(const std::string& id) {
  return one("SELECT doc FROM snapshots WHERE id = $1", {id}, "reading snapshot");
}

Result<std::vector<std::string>> PostgresStore::snapshot_ids_with_prefix(const std::string& prefix,
                                                                         int limit) {
  return ids_with_prefix("snapshots", prefix, limit, "snapshot");
}

Result<SnapshotPage> PostgresStore::list_snapshots(const std::string& run_id, const std::string& state,
                                                   int64_t limit, int64_t offset) {
  const std::string where = " FROM snapshots WHERE run_id = $1 AND ($2 = '' OR state = $2)";
  SnapshotPage page;
  {
    auto total = locked([&] {
      return count("SELECT COUNT(*)" + where, {run_id, state}, "counting snapshots");
    });
    if (!total.is_ok()) return total.status();
    page.total = *total;
  }
  auto rows = docs("SELECT doc" + where + " ORDER BY step DESC, id LIMIT $3 OFFSET $4",
                   Params().text(run_id).text(state).limit(limit).offset(offset), "listing snapshots");
  if (!rows.is_ok()) return rows.status();
  page.snapshots = std::move(*rows);
  return page;
}

Result<std::vector<json>> PostgresStore::snapshots_with_reserved_kinds(int64_t limit) {
  // Any member of doc.kinds whose state is "reserved" (SQLite: json_each over $.kinds).
  return docs(
      "SELECT doc FROM snapshots WHERE jsonb_path_exists(doc::jsonb, '$.kinds.* ? (@.state == "
      "\"reserved\")') "
      "ORDER BY seq LIMIT $1",
      Params().limit(limit), "reading snapshots with reserved kinds");
}

// ---- the model registry
Params PostgresStore::trained_model_columns(const json& doc) {
  const json& w = doc.at("workload");
  return Params{
      doc.at("modelId").get<std::string>(), w.is_object() ? w.at("id").get<std::string>() : std::string(),
      doc.at("baseModel").at("name").get<std::string>(), doc.at("status").get<std::string>(), text_of(doc)};
}

Status PostgresStore::insert_trained_model(const json& doc) {
  const Params c = trained_model_columns(doc);
  const std::string id = doc.at("modelId").get<std::string>();
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows r,
                             run("INSERT INTO trained_models(id, workload_id, base_model, status, doc) "
                                 "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
                                 c, "inserting model"));
    if (r.changed() == 0) return already_exists("model " + id + " is already registered");
    return Status::ok();
  });
}

Status PostgresStore::update_trained_model(const json& doc) {
  const Params c = trained_model_columns(doc);
  const std::string id = doc.at("modelId").get<std::string>();
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("UPDATE trained_models SET workload_id = $2, base_model = $3, status = $4, doc = $5 "
                    "WHERE id = $1",
                    c, "updating model"));
    if (r.changed() == 0) return not_found("model " + id);
    return Status::ok();
  });
}

Result<std::optional<json>> PostgresStore::get_trained_model(const std::string& id) {
  return one("SELECT doc FROM trained_models WHERE id = $1", {id}, "reading model");
}

Result<std::vector<std::string>> PostgresStore::trained_model_ids_with_prefix(const std::string& prefix,
                                                                              int limit) {
  return ids_with_prefix("trained_models", prefix, limit, "model");
}

Result<std::vector<json>> PostgresStore::list_trained_models(const std::string& workload_id,
                                                             const std::string& base_model,
                                                             const std::vector<std::string>& statuses) {
  Params p{workload_id, base_model};
  const std::string sql =
      "SELECT doc FROM trained_models WHERE ($1 = '' OR workload_id = $1) AND ($2 = '' OR base_model = $2)" +
      p.in_list("status", statuses) + " ORDER BY seq DESC";
  return docs(sql, p, "listing models");
}

// ---- evaluations and endpoints
Status PostgresStore::put_phased_doc(const char* table, const char* id_key, const json& doc,
                                     const char* what) {
  const std::string sql = std::string("INSERT INTO ") + table +
                          "(id, phase, doc) VALUES ($1, $2, $3) "
                          "ON CONFLICT (id) DO UPDATE SET phase = EXCLUDED.phase, doc = EXCLUDED.doc";
  const Params p{doc.at(id_key).get<std::string>(), doc.at("phase").get<std::string>(), text_of(doc)};
  return locked([&] { return write(sql.c_str(), p, std::string("writing ") + what); });
}

Status PostgresStore::put_evaluation(const json& doc) {
  return put_phased_doc("evaluations", "evaluationId", doc, "evaluation");
}

Result<std::optional<json>> PostgresStore::get_evaluation(const std::string& id) {
  return one("SELECT doc FROM evaluations WHERE id = $1", {id}, "reading evaluation");
}

Result<std::vector<std::string>> PostgresStore::evaluation_ids_with_prefix(const std::string& prefix,
                                                                           int limit) {
  return ids_with_prefix("evaluations", prefix, limit, "evaluation");
}

Result<std::vector<json>> PostgresStore::list_evaluations(const std::vector<std::string>& phases) {
  Params p;
  const std::string sql =
      "SELECT doc FROM evaluations WHERE true" + p.in_list("phase", phases) + " ORDER BY created_seq DESC";
  return docs(sql, p, "listing evaluations");
}

// ---- dataset analyses
Status PostgresStore::put_dataset_analysis(const json& doc) {
  const json id = doc.value("analysisId", json()), phase = doc.value("phase", json());
  const json dataset = doc.value("dataset", json());
  const json hash = dataset.is_object() ? dataset.value("hash", json()) : json();
  if (!id.is_string() || !phase.is_string() || !hash.is_string()) {
    return invalid_argument("a dataset analysis needs string analysisId, phase and dataset.hash");
  }
  // A replaced row keeps its created_seq (its place in the list).
  const Params p{id.get<std::string>(), hash.get<std::string>(), phase.get<std::string>(), text_of(doc)};
  return locked([&] {
    return write("INSERT INTO dataset_analyses(id, dataset_hash, phase, doc) VALUES ($1, $2, $3, $4) "
                 "ON CONFLICT (id) DO UPDATE SET phase = EXCLUDED.phase, doc = EXCLUDED.doc",
                 p, "writing dataset analysis");
  });
}

Result<std::optional<json>> PostgresStore::get_dataset_analysis(const std::string& id) {
  return one("SELECT doc FROM dataset_analyses WHERE id = $1", {id}, "reading dataset analysis");
}

Result<std::vector<json>> PostgresStore::list_dataset_analyses(const std::string& dataset_hash) {
  return docs("SELECT doc FROM dataset_analyses WHERE dataset_hash = $1 ORDER BY created_seq DESC",
              Params{dataset_hash}, "listing dataset analyses");
}

Status PostgresStore::put_pipeline(const json& doc) {
  return put_phased_doc("pipelines", "pipelineId", doc, "pipeline");
}

Result<std::optional<json>> PostgresStore::get_pipeline(const std::string& id) {
  return one("SELECT doc FROM pipelines WHERE id = $1", {id}, "reading pipeline");
}

Result<std::vector<std::string>> PostgresStore::pipeline_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("pipelines", prefix, limit, "pipeline");
}

Result<std::vector<json>> PostgresStore::list_pipelines(const std::vector<std::string>& phases) {
  Params p;
  const std::string sql =
      "SELECT doc FROM pipelines WHERE true" + p.in_list("phase", phases) + " ORDER BY created_seq DESC";
  return docs(sql, p, "listing pipelines");
}

// ---- API tokens
Status PostgresStore::put_api_token(const json& doc) {
  const json id = doc.value("tokenId", json()), hash = doc.value("hash", json());
  if (!id.is_string() || !hash.is_string()) return invalid_argument("an API token needs string tokenId and hash");
  const Params p{id.get<std::string>(), hash.get<std::string>(), text_of(doc)};
  return locked([&] {
    return write("INSERT INTO api_tokens(id, hash, doc) VALUES ($1, $2, $3) "
                 "ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc",
                 p, "writing API token");
  });
}

Result<std::optional<json>> PostgresStore::find_api_token(const std::string& hash) {
  return one("SELECT doc FROM api_tokens WHERE hash = $1", {hash}, "reading API token");
}

Result<std::vector<json>> PostgresStore::list_api_tokens() {
  return docs("SELECT doc FROM api_tokens ORDER BY created_seq", Params{}, "listing API tokens");
}

Status PostgresStore::put_endpoint(const json& doc) {
  return put_phased_doc("endpoints", "endpointId", doc, "endpoint");
}

Result<std::optional<json>> PostgresStore::get_endpoint(const std::string& id) {
  return one("SELECT doc FROM endpoints WHERE id = $1", {id}, "reading endpoint");
}

Result<std::vector<std::string>> PostgresStore::endpoint_ids_with_prefix(const std::string& prefix,
                                                                         int limit) {
  return ids_with_prefix("endpoints", prefix, limit, "endpoint");
}

Result<std::vector<json>> PostgresStore::list_endpoints(const std::vector<std::string>& phases) {
  Params p;
  const std::string sql =
      "SELECT doc FROM endpoints WHERE true" + p.in_list("phase", phases) + " ORDER BY created_seq DESC";
  return docs(sql, p, "listing endpoints");
}

// ---- scoring bundles
Status PostgresStore::insert_bundle_version(const json& doc) {
  const std::string name = doc.at("name").get<std::string>();
  const int64_t version = doc.at("version").get<int64_t>();
  const Params p =
      Params().text(name).integer(version).text(doc.at("sha").get<std::string>()).text(text_of(doc));
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO bundle_versions(name, version, sha, doc) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (name, version) DO NOTHING",
                    p, "inserting bundle version"));
    if (r.changed() == 0) {
      return already_exists("bundle " + name + " version " + std::to_string(version) + " already exists");
    }
    return Status::ok();
  });
}

Result<std::vector<json>> PostgresStore::list_bundle_versions() {
  return docs("SELECT doc FROM bundle_versions ORDER BY name, version", {}, "listing bundle versions");
}

// ---- comparisons
Params PostgresStore::comparison_columns(const json& doc) {
  return Params{doc.at("comparisonId").get<std::string>(),
                doc.at("source").at("snapshotId").get<std::string>(), doc.at("phase").get<std::string>(),
                text_of(doc)};
}

Status PostgresStore::insert_comparison(const json& doc) {
  const Params c = comparison_columns(doc);
  const std::string id = doc.at("comparisonId").get<std::string>();
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("INSERT INTO comparisons(id, source_snapshot, phase, doc) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (id) DO NOTHING",
                    c, "inserting comparison"));
    if (r.changed() == 0) return already_exists("comparison " + id + " already exists");
    return Status::ok();
  });
}

Status PostgresStore::update_comparison(const json& doc) {
  const Params c = comparison_columns(doc);
  const std::string id = doc.at("comparisonId").get<std::string>();
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(
        Rows r, run("UPDATE comparisons SET source_snapshot = $2, phase = $3, doc = $4 WHERE id = $1", c,
                    "updating comparison"));
    if (r.changed() == 0) return not_found("comparison " + id);
    return Status::ok();
  });
}

Result<std::optional<json>> PostgresStore::get_comparison(const std::string& id) {
  return one("SELECT doc FROM comparisons WHERE id = $1", {id}, "reading comparison");
}

Result<std::vector<std::string>> PostgresStore::comparison_ids_with_prefix(const std::string& prefix,
                                                                           int limit) {
  return ids_with_prefix("comparisons", prefix, limit, "comparison");
}

Result<ComparisonPage> PostgresStore::list_comparisons(const std::string& source_snapshot,
                                                       const std::vector<std::string>& phases, int64_t limit,
                                                       int64_t offset) {
  Params p{source_snapshot};
  const std::string where =
      " FROM comparisons WHERE ($1 = '' OR source_snapshot = $1)" + p.in_list("phase", phases);
  const std::string at_limit = "$" + std::to_string(p.size() + 1);
  const std::string at_offset = "$" + std::to_string(p.size() + 2);
  ComparisonPage page;
  {
    auto total = locked([&] { return count("SELECT COUNT(*)" + where, p, "counting comparisons"); });
    if (!total.is_ok()) return total.status();
    page.total = *total;
  }
  Params paged = p;
  paged.limit(limit).offset(offset);
  auto rows = docs("SELECT doc" + where + " ORDER BY seq DESC LIMIT " + at_limit + " OFFSET " + at_offset,
                   paged, "listing comparisons");
  if (!rows.is_ok()) return rows.status();
  page.comparisons = std::move(*rows);
  return page;
}

// ---- lineage
Status PostgresStore::insert_child(const std::string& run_id, const std::string& parent_id) {
  return locked([&]() -> Status {
    TRAINER_ASSIGN_OR_RETURN(Rows r, run("INSERT INTO run_lineage(run_id, parent_id) VALUES ($1, $2) "
                                         "ON CONFLICT (run_id) DO NOTHING",
                                         {run_id, parent_id}, "inserting lineage"));
    if (r.changed() == 0) return already_exists("run " + run_id + " already has a parent");
    return Status::ok();
  });
}

Result<ChildPage> PostgresStore::run_children(const std::string& parent_id, int64_t limit, int64_t offset) {
  return locked([&]() -> Result<ChildPage> {
    ChildPage page;
    TRAINER_ASSIGN_OR_RETURN(page.total, count("SELECT COUNT(*) FROM run_lineage WHERE parent_id = $1",
                                               {parent_id}, "counting children"));
    TRAINER_ASSIGN_OR_RETURN(Rows r,
                             run("SELECT run_id FROM run_lineage WHERE parent_id = $1 ORDER BY seq DESC "
                                 "LIMIT $2 OFFSET $3",
                                 Params().text(parent_id).limit(limit).offset(offset), "reading children"));
    for (int i = 0; i < r.size(); ++i) page.run_ids.push_back(r.text(i, 0));
    return page;
  });
}

}  // namespace trainer::store::postgres
