// The seam between the training loop and a network: what Trainer (trainer.hpp) needs of a model
// to train it, so that the loop, AdamW, the schedule, clipping, checkpoints and resume have one
// home whatever the architecture.
//
// A trainable network computes over a ParameterSet (network.hpp: named f32 tensors under their
// checkpoint names, each with a gradient buffer): forward() lays one TrainingBatch of an
// objective (objective.hpp) through the network and returns the logits of the batch's predicted
// rows, keeping what its backward needs on a tape; backward() adds every parameter's gradient.
// TrainableTransformer (network.hpp) is one; a model plugin may provide others through
// TrainableModel (the rnn-seq2seq plugin does), which `masque train` finds on the plugin's Model.
#pragma once

#include <cstdint>
#include <memory>

#include <boost/config.hpp>

#include "masque/tensor.hpp"

namespace masque::train {

class ParameterSet;
struct NetworkOptions;
struct TrainingBatch;
struct DropoutContext;

// What a forward keeps for its backward; each network derives its own.
struct BOOST_SYMBOL_VISIBLE NetworkTape {
  virtual ~NetworkTape();  // out of line: one type_info for plugins' casts
};

class BOOST_SYMBOL_VISIBLE TrainableNetwork {
 public:
  virtual ~TrainableNetwork();

  virtual const NetworkOptions& options() const = 0;
  virtual std::unique_ptr<NetworkTape> new_tape() const = 0;
  // Logits [batch.rows.size(), vocab] of the batch's predicted rows. `dropout`: training with
  // the options' rates, masks drawn from this context; null: no dropout. The batch must stay
  // alive until the backward of this forward.
  virtual void forward(const TrainingBatch& batch, NetworkTape& tape, Tensor& logits,
                       const DropoutContext* dropout) const = 0;
  // Adds d(loss)/d(parameter) to every parameter's grad, given d(loss)/d(logits) of the last
  // forward on `tape`.
  virtual void backward(NetworkTape& tape, const Tensor& dlogits) const = 0;
  // The same network over `params` (a copy of this one's, with its own gradients): the
  // trainer's parallel parts.
  virtual std::unique_ptr<TrainableNetwork> replica(ParameterSet& params) const = 0;
};

// Implemented, next to masque::Model, by a model plugin's model that masque train can train
// (besides the Transformers of masque/transformer). The model was created with its `init_seed`
// parameter: >= 0 means initialised from that seed, -1 loaded from the folder's checkpoint.
class BOOST_SYMBOL_VISIBLE TrainableModel {
 public:
  virtual ~TrainableModel();
  // The architecture's name as a run reports it.
  virtual const char* trainable_architecture() const = 0;
  // The model's parameters as they are now, under their checkpoint names.
  virtual ParameterSet parameters() const = 0;
  // A network over `params` (from parameters(); they must outlive it). ConfigError for options
  // the architecture does not support.
  virtual std::unique_ptr<TrainableNetwork> network(ParameterSet& params,
                                                    const NetworkOptions& options) const = 0;
};

}  // namespace masque::train
