// The SQLite Store's catalog tables (declared in store/sqlite_store.h): snapshots, the model
// registry, evaluations, comparisons, scoring bundles and run lineage.
#include "store/sqlite_store.h"

namespace trainer::store::sqlite {

// ---- snapshots
Status SqliteStore::insert_snapshot(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO snapshots(id, run_id, step, state, doc) VALUES (?, ?, ?, ?, ?)");
  s.bind(1, doc.at("snapshotId").get<std::string>())
      .bind(2, doc.at("runId").get<std::string>())
      .bind(3, doc.at("savedStep").get<int64_t>())
      .bind(4, doc.at("state").get<std::string>())
      .bind(5, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) {
    return already_exists("snapshot " + doc.at("snapshotId").get<std::string>() + " is already in the catalog");
  }
  if (rc != SQLITE_DONE) return db_error(db_, "inserting snapshot");
  return Status::ok();
}

Status SqliteStore::update_snapshot(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "UPDATE snapshots SET state = ?, doc = ? WHERE id = ?");
  s.bind(1, doc.at("state").get<std::string>())
      .bind(2, doc.dump(-1, ' ', false, json::error_handler_t::replace))
      .bind(3, doc.at("snapshotId").get<std::string>());
  if (s.step() != SQLITE_DONE) return db_error(db_, "updating snapshot");
  if (sqlite3_changes(db_) == 0) return not_found("snapshot " + doc.at("snapshotId").get<std::string>());
  return Status::ok();
}

Result<std::optional<json>> SqliteStore::get_snapshot(const std::string& id) {
  return one("SELECT doc FROM snapshots WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::snapshot_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("snapshots", prefix, limit, "snapshot");
}

Result<SnapshotPage> SqliteStore::list_snapshots(const std::string& run_id, const std::string& state, int64_t limit,
                                    int64_t offset) {
  SnapshotPage page;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt c(db_, "SELECT COUNT(*) FROM snapshots WHERE run_id = ?1 AND (?2 = '' OR state = ?2)");
    c.bind(1, run_id).bind(2, state);
    if (c.step() != SQLITE_ROW) return db_error(db_, "counting snapshots");
    page.total = c.integer(0);
  }
  std::vector<std::string> args = {run_id, state, std::to_string(limit), std::to_string(offset)};
  auto rows = docs(
      "SELECT doc FROM snapshots WHERE run_id = ?1 AND (?2 = '' OR state = ?2) ORDER BY step DESC, id "
      "LIMIT CAST(?3 AS INTEGER) OFFSET CAST(?4 AS INTEGER)",
      args);
  if (!rows.is_ok()) return rows.status();
  page.snapshots = std::move(*rows);
  return page;
}

Result<std::vector<json>> SqliteStore::snapshots_with_reserved_kinds(int64_t limit) {
  return docs(
      "SELECT doc FROM snapshots WHERE EXISTS (SELECT 1 FROM json_each(doc, '$.kinds') "
      "WHERE json_extract(value, '$.state') = 'reserved') ORDER BY rowid LIMIT CAST(?1 AS INTEGER)",
      {std::to_string(limit)});
}

// ---- the model registry
std::vector<std::string> SqliteStore::trained_model_columns(const json& doc) {
  const json& w = doc.at("workload");
  return {doc.at("modelId").get<std::string>(), w.is_object() ? w.at("id").get<std::string>() : std::string(),
          doc.at("baseModel").at("name").get<std::string>(), doc.at("status").get<std::string>(),
          doc.dump(-1, ' ', false, json::error_handler_t::replace)};
}

Status SqliteStore::insert_trained_model(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto c = trained_model_columns(doc);
  Stmt s(db_, "INSERT INTO trained_models(id, workload_id, base_model, status, doc) VALUES (?, ?, ?, ?, ?)");
  for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
  int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("model " + c[0] + " is already registered");
  if (rc != SQLITE_DONE) return db_error(db_, "inserting model");
  return Status::ok();
}

Status SqliteStore::update_trained_model(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto c = trained_model_columns(doc);
  Stmt s(db_, "UPDATE trained_models SET workload_id = ?2, base_model = ?3, status = ?4, doc = ?5 WHERE id = ?1");
  for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
  if (s.step() != SQLITE_DONE) return db_error(db_, "updating model");
  if (sqlite3_changes(db_) == 0) return not_found("model " + c[0]);
  return Status::ok();
}

Result<std::optional<json>> SqliteStore::get_trained_model(const std::string& id) {
  return one("SELECT doc FROM trained_models WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::trained_model_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("trained_models", prefix, limit, "model");
}

Result<std::vector<json>> SqliteStore::list_trained_models(const std::string& workload_id, const std::string& base_model,
                                              const std::vector<std::string>& statuses) {
  std::string sql = "SELECT doc FROM trained_models WHERE (?1 = '' OR workload_id = ?1) AND (?2 = '' OR base_model = ?2)";
  std::vector<std::string> args = {workload_id, base_model};
  sql += in_list("status", statuses, &args);
  sql += " ORDER BY seq DESC";
  return docs(sql.c_str(), args);
}

// ---- evaluations
Status SqliteStore::put_phased_doc(const char* table, const char* id_key, const json& doc, const char* what) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const std::string t = table;
  const std::string sql = "INSERT INTO " + t + "(id, created_seq, phase, doc) VALUES (?1, (SELECT COALESCE(MAX(created_seq), 0) + 1 FROM " +
                          t + "), ?2, ?3) ON CONFLICT(id) DO UPDATE SET phase = excluded.phase, doc = excluded.doc";
  Stmt s(db_, sql.c_str());
  s.bind(1, doc.at(id_key).get<std::string>())
      .bind(2, doc.at("phase").get<std::string>())
      .bind(3, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, std::string("writing ") + what);
  return Status::ok();
}

Status SqliteStore::put_evaluation(const json& doc) {
  return put_phased_doc("evaluations", "evaluationId", doc, "evaluation");
}

Result<std::optional<json>> SqliteStore::get_evaluation(const std::string& id) {
  return one("SELECT doc FROM evaluations WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::evaluation_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("evaluations", prefix, limit, "evaluation");
}

Result<std::vector<json>> SqliteStore::list_evaluations(const std::vector<std::string>& phases) {
  auto all = docs("SELECT doc FROM evaluations ORDER BY created_seq DESC", {});
  if (!all.is_ok() || phases.empty()) return all;
  std::vector<json> out;
  for (auto& d : *all) {
    if (std::find(phases.begin(), phases.end(), d.value("phase", std::string())) != phases.end()) out.push_back(std::move(d));
  }
  return out;
}

// ---- dataset analyses
Status SqliteStore::put_dataset_analysis(const json& doc) {
  const json id = doc.value("analysisId", json()), phase = doc.value("phase", json());
  const json dataset = doc.value("dataset", json());
  const json hash = dataset.is_object() ? dataset.value("hash", json()) : json();
  if (!id.is_string() || !phase.is_string() || !hash.is_string()) {
    return invalid_argument("a dataset analysis needs string analysisId, phase and dataset.hash");
  }
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_,
         "INSERT INTO dataset_analyses(id, created_seq, dataset_hash, phase, doc) VALUES (?1, (SELECT "
         "COALESCE(MAX(created_seq), 0) + 1 FROM dataset_analyses), ?2, ?3, ?4) ON CONFLICT(id) DO UPDATE SET "
         "phase = excluded.phase, doc = excluded.doc");
  s.bind(1, id.get<std::string>())
      .bind(2, hash.get<std::string>())
      .bind(3, phase.get<std::string>())
      .bind(4, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.step() != SQLITE_DONE) return db_error(db_, "writing dataset analysis");
  return Status::ok();
}

Result<std::optional<json>> SqliteStore::get_dataset_analysis(const std::string& id) {
  return one("SELECT doc FROM dataset_analyses WHERE id = ?", {id});
}

Result<std::vector<json>> SqliteStore::list_dataset_analyses(const std::string& dataset_hash) {
  return docs("SELECT doc FROM dataset_analyses WHERE dataset_hash = ? ORDER BY created_seq DESC", {dataset_hash});
}

// ---- API tokens
Status SqliteStore::put_api_token(const json& doc) {
  const json id = doc.value("tokenId", json()), hash = doc.value("hash", json());
  if (!id.is_string() || !hash.is_string()) return invalid_argument("an API token needs string tokenId and hash");
  return write(
      "INSERT INTO api_tokens(id, created_seq, hash, doc) VALUES (?1, (SELECT COALESCE(MAX(created_seq), 0) + 1 "
      "FROM api_tokens), ?2, ?3) ON CONFLICT(id) DO UPDATE SET doc = excluded.doc",
      {id.get<std::string>(), hash.get<std::string>(), doc.dump(-1, ' ', false, json::error_handler_t::replace)});
}

Result<std::optional<json>> SqliteStore::find_api_token(const std::string& hash) {
  return one("SELECT doc FROM api_tokens WHERE hash = ?", {hash});
}

Result<std::vector<json>> SqliteStore::list_api_tokens() {
  return docs("SELECT doc FROM api_tokens ORDER BY created_seq", {});
}

// ---- endpoints
Status SqliteStore::put_endpoint(const json& doc) { return put_phased_doc("endpoints", "endpointId", doc, "endpoint"); }

Result<std::optional<json>> SqliteStore::get_endpoint(const std::string& id) {
  return one("SELECT doc FROM endpoints WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::endpoint_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("endpoints", prefix, limit, "endpoint");
}

Result<std::vector<json>> SqliteStore::list_endpoints(const std::vector<std::string>& phases) {
  std::string sql = "SELECT doc FROM endpoints WHERE 1 = 1";
  std::vector<std::string> args;
  sql += in_list("phase", phases, &args);
  sql += " ORDER BY created_seq DESC";
  return docs(sql.c_str(), args);
}

// ---- pipelines
Status SqliteStore::put_pipeline(const json& doc) { return put_phased_doc("pipelines", "pipelineId", doc, "pipeline"); }

Result<std::optional<json>> SqliteStore::get_pipeline(const std::string& id) {
  return one("SELECT doc FROM pipelines WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::pipeline_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("pipelines", prefix, limit, "pipeline");
}

Result<std::vector<json>> SqliteStore::list_pipelines(const std::vector<std::string>& phases) {
  std::string sql = "SELECT doc FROM pipelines WHERE 1 = 1";
  std::vector<std::string> args;
  sql += in_list("phase", phases, &args);
  sql += " ORDER BY created_seq DESC";
  return docs(sql.c_str(), args);
}

// ---- comparisons
std::vector<std::string> SqliteStore::comparison_columns(const json& doc) {
  return {doc.at("comparisonId").get<std::string>(), doc.at("source").at("snapshotId").get<std::string>(),
          doc.at("phase").get<std::string>(), doc.dump(-1, ' ', false, json::error_handler_t::replace)};
}

// ---- scoring bundles
Status SqliteStore::insert_bundle_version(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const std::string name = doc.at("name").get<std::string>();
  const int64_t version = doc.at("version").get<int64_t>();
  Stmt s(db_, "INSERT INTO bundle_versions(name, version, sha, doc) VALUES (?, ?, ?, ?)");
  s.bind(1, name).bind(2, version).bind(3, doc.at("sha").get<std::string>());
  s.bind(4, doc.dump(-1, ' ', false, json::error_handler_t::replace));
  const int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("bundle " + name + " version " + std::to_string(version) + " already exists");
  if (rc != SQLITE_DONE) return db_error(db_, "inserting bundle version");
  return Status::ok();
}

Result<std::vector<json>> SqliteStore::list_bundle_versions() {
  return docs("SELECT doc FROM bundle_versions ORDER BY name, version", {});
}

Status SqliteStore::insert_comparison(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto c = comparison_columns(doc);
  Stmt s(db_, "INSERT INTO comparisons(id, source_snapshot, phase, doc) VALUES (?, ?, ?, ?)");
  for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
  const int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("comparison " + c[0] + " already exists");
  if (rc != SQLITE_DONE) return db_error(db_, "inserting comparison");
  return Status::ok();
}

Status SqliteStore::update_comparison(const json& doc) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  const auto c = comparison_columns(doc);
  Stmt s(db_, "UPDATE comparisons SET source_snapshot = ?2, phase = ?3, doc = ?4 WHERE id = ?1");
  for (size_t i = 0; i < c.size(); ++i) s.bind(static_cast<int>(i + 1), c[i]);
  if (s.step() != SQLITE_DONE) return db_error(db_, "updating comparison");
  if (sqlite3_changes(db_) == 0) return not_found("comparison " + c[0]);
  return Status::ok();
}

Result<std::optional<json>> SqliteStore::get_comparison(const std::string& id) {
  return one("SELECT doc FROM comparisons WHERE id = ?", {id});
}

Result<std::vector<std::string>> SqliteStore::comparison_ids_with_prefix(const std::string& prefix, int limit) {
  return ids_with_prefix("comparisons", prefix, limit, "comparison");
}

Result<ComparisonPage> SqliteStore::list_comparisons(const std::string& source_snapshot, const std::vector<std::string>& phases,
                                        int64_t limit, int64_t offset) {
  std::string where = " WHERE (?1 = '' OR source_snapshot = ?1)";
  std::vector<std::string> args = {source_snapshot};
  where += in_list("phase", phases, &args);
  ComparisonPage page;
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Stmt c(db_, ("SELECT COUNT(*) FROM comparisons" + where).c_str());
    for (size_t i = 0; i < args.size(); ++i) c.bind(static_cast<int>(i + 1), args[i]);
    if (c.step() != SQLITE_ROW) return db_error(db_, "counting comparisons");
    page.total = c.integer(0);
  }
  const std::string sql = "SELECT doc FROM comparisons" + where + " ORDER BY seq DESC LIMIT " + std::to_string(limit) +
                          " OFFSET " + std::to_string(offset);
  auto rows = docs(sql.c_str(), args);
  if (!rows.is_ok()) return rows.status();
  page.comparisons = std::move(*rows);
  return page;
}

// ---- lineage
Status SqliteStore::insert_child(const std::string& run_id, const std::string& parent_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Stmt s(db_, "INSERT INTO run_lineage(run_id, parent_id) VALUES (?, ?)");
  s.bind(1, run_id).bind(2, parent_id);
  const int rc = s.step();
  if (rc == SQLITE_CONSTRAINT) return already_exists("run " + run_id + " already has a parent");
  if (rc != SQLITE_DONE) return db_error(db_, "inserting lineage");
  return Status::ok();
}

Result<ChildPage> SqliteStore::run_children(const std::string& parent_id, int64_t limit, int64_t offset) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  ChildPage page;
  Stmt c(db_, "SELECT COUNT(*) FROM run_lineage WHERE parent_id = ?");
  c.bind(1, parent_id);
  if (c.step() != SQLITE_ROW) return db_error(db_, "counting children");
  page.total = c.integer(0);
  Stmt s(db_, "SELECT run_id FROM run_lineage WHERE parent_id = ?1 ORDER BY seq DESC LIMIT ?2 OFFSET ?3");
  s.bind(1, parent_id).bind(2, limit).bind(3, offset);
  int rc;
  while ((rc = s.step()) == SQLITE_ROW) page.run_ids.push_back(s.text(0));
  if (rc != SQLITE_DONE) return db_error(db_, "reading children");
  return page;
}

}  // namespace trainer::store::sqlite
