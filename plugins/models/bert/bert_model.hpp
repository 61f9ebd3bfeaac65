// The `bert` model plugin's Model: a BertForMaskedLM checkpoint under any attention layout.
//
// BERT itself is bidirectional; the layout decides the task (../shared/DESIGN.md). The model
// applies the layout as given: a full forward for any layout (rank-based or dense, with query
// tokens), and KV-cached start/step wherever the layout's ranks allow it. Caching a post-norm
// bidirectional model is exact only when earlier tokens never see later ones, which is what a
// mask strategy's supports_incremental() promises; the model does not second-guess it.
#pragma once

#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "bert_encoder.hpp"
#include "masque/model.hpp"

namespace masque::bert {

// Workspaces for concurrent forward() calls: one per caller at a time, reused afterwards.
class WorkspacePool {
 public:
  class Lease {
   public:
    Lease(const WorkspacePool& pool, std::unique_ptr<Workspace> ws)
        : pool_(pool), ws_(std::move(ws)) {}
    ~Lease() { pool_.release(std::move(ws_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace& operator*() const { return *ws_; }

   private:
    const WorkspacePool& pool_;
    std::unique_ptr<Workspace> ws_;
  };
  Lease acquire() const;

 private:
  void release(std::unique_ptr<Workspace> ws) const;
  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<Workspace>> free_;
};

struct BertOptions {
  std::filesystem::path path;  // the model folder
  bool mlm_head = true;        // load cls.predictions (false: hidden states only)
  DType compute = DType::f32;  // every Linear's matmul type, f32, bf16 or i8 (LinearOptions)
};

class BertModel final : public Model {
 public:
  explicit BertModel(const BertOptions& options);

  const ModelInfo& info() const override { return info_; }
  ForwardResult forward(const Batch& batch) const override;
  std::unique_ptr<DecodeState> start(const Batch& batch, Tensor* logits) const override;
  void step(DecodeState& state, const StepInput& input, Tensor& logits) const override;

 private:
  // Copies the batch's inputs into ws (pads neutralised, defaults filled) after checking them.
  void prepare_inputs(const Batch& batch, Workspace& ws) const;
  void prepare_step(const StepInput& input, std::span<const std::int32_t> positions,
                    Workspace& ws) const;
  // The final hidden states of the rows that need outputs (ws.h itself when that is all rows).
  const Tensor& output_rows(const Batch& batch, Workspace& ws) const;
  void predict(const Tensor& hidden, Workspace& ws, Tensor& logits) const;

  std::filesystem::path path_;
  Encoder encoder_;
  ModelInfo info_;
  WorkspacePool pool_;
};

}  // namespace masque::bert
