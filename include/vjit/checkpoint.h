#pragma once
// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors),
// readable by PyTorch, NumPy, JAX, ... without vjit:
//
//   vjit::save_checkpoint("run.safetensors", engine, &adam, {{"epoch", "3"}});
//   ...                                          // later, a fresh process
//   vjit::Engine engine(program);                // the same program and model shapes
//   auto metadata = vjit::load_checkpoint("run.safetensors", engine, &adam);  // metadata["epoch"] == "3"
//
// The file. A safetensors file: 8 bytes (the header's size N, little-endian),
// N bytes of JSON header (per tensor its dtype, shape and byte range; string
// metadata under "__metadata__"), then the tensors' data. Tensors:
//   <parameter name>           F32, the parameter's shape ([n] or [rows, cols])
//   optimizer.<slot>.<name>    F32, the parameter's shape: the optimizer's state
//                              slot for that parameter, named as in PyTorch —
//                              Adam: exp_avg (m), exp_avg_sq (v); SGD with
//                              momentum: momentum_buffer; AdaGrad: sum
//   optimizer.step             I64, shape []: the optimizer's step count t
// Metadata (all strings): "vjit.format" = "checkpoint", "vjit.version" = "1",
// "vjit.signature" (Program::signature_string()), "vjit.train_steps"
// (Engine::train_steps()), "vjit.frozen" (the names of the frozen parameters,
// constant tensors included, comma-separated; load_checkpoint checks the model
// freezes the same ones), "vjit.optimizer" (Optimizer::kind()),
// "vjit.optimizer.slots" (its slot names, comma-separated),
// "vjit.optimizer.<hyper-parameter>" (each of Optimizer::hyper_parameters(),
// printed to round-trip a float), "vjit.checksum" = "crc32" and, for every
// tensor, "vjit.crc32.<tensor name>": the CRC-32 of its data bytes as 8
// lower-case hex digits (Python: f"{zlib.crc32(data):08x}"), and the user's
// own entries, whose keys must not start with "vjit.". In PyTorch:
//   from safetensors.torch import load_file
//   state = load_file("run.safetensors"); model.load_state_dict(
//       {k: v for k, v in state.items() if not k.startswith("optimizer.")})
//
// Saving is atomic and durable: a temporary file in the same directory,
// fsync'ed and renamed over the path, then the directory fsync'ed; after a
// crash or kill at any point the path holds the old checkpoint or the new one,
// whole. A killed writer leaves its temporary file "<path>.tmp.<pid>.<n>";
// the next save to the path removes it. Errors name the path and the system's
// reason. A weight or state value that is not finite (NaN, ±Inf) is refused
// before anything is written, naming the tensor and the element: a load would
// refuse the file.
//
// Loading validates the whole file before it changes anything: a regular
// file (a directory is refused naming it), the safetensors structure (sizes,
// JSON, dtypes, byte ranges inside the data, covering it without gaps or
// overlaps), then every tensor against the model (present, F32, same shape,
// its checksum, finite values only, none extra) and, for a checkpoint, its
// format version, the program's signature (the first line that differs is
// named), the frozen parameters (the first that differs is named) and the
// optimizer's kind and slots. On any error it throws a UserError naming the
// file and what differs (a checksum that does not match, or a NaN or ±Inf,
// names the tensor), and the Model, the engine and the optimizer are left
// exactly as they were. A file without "vjit.checksum" (written before vjit
// wrote checksums, or by another tool) loads unverified; one with it must have
// every tensor's checksum. Only the tensors a load reads are verified
// (load_parameters reads the parameters, not a checkpoint's optimizer state).
#include <map>
#include <string>

#include "vjit/engine.h"
#include "vjit/model.h"
#include "vjit/optimizer.h"

namespace vjit {

/// Saves the parameters of the engine's model, the engine's train_steps(), the
/// program's signature and `user_metadata`; with `optimizer`, also the state
/// the engine keeps for it (slots and step count; zeros and step 0 when it has
/// taken no step with this engine yet) and its kind and hyper-parameters.
/// What it saves is copied under the engine's lock (one step's weights and
/// state, as a train_step on another thread leaves them); the file is written
/// after the lock is released.
void save_checkpoint(const std::string& path, const Engine& engine, const Optimizer* optimizer = nullptr,
                     const std::map<std::string, std::string>& user_metadata = {});

/// Resumes from a checkpoint of save_checkpoint: the parameters go into the
/// engine's model (and to the GPU when the engine runs there), train_steps()
/// is restored, and with `optimizer` the saved state is adopted by it and
/// handed to the engine, so that the next train_step(batch, *optimizer)
/// continues exactly where the saved run was (bit for bit, given the same
/// batches and hyper-parameters; the optimizer's own settings are kept, the
/// saved ones are only recorded). Without `optimizer` the engine's optimizer
/// state is cleared (the next step starts a fresh one). Returns the user's
/// metadata. The file must hold optimizer state when `optimizer` is given, of
/// the same kind and slots.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Engine& engine,
                                                    Optimizer* optimizer = nullptr);

/// Parameters only, as PyTorch's safetensors.torch.save_file(model.state_dict())
/// writes them: one F32 tensor per parameter, named and shaped as it, the
/// checksums ("vjit.checksum", "vjit.crc32.<name>", as above) and `metadata`
/// (keys not starting with "vjit.") when given.
void save_parameters(const std::string& path, const Model& model,
                     const std::map<std::string, std::string>& metadata = {});
/// Reads the parameters from any safetensors file with exactly one F32 tensor
/// per parameter of the model, of its name and shape, and no other tensors
/// (of a vjit checkpoint, the optimizer.* tensors are skipped); metadata is
/// not needed. An engine running on the GPU needs Engine::upload_parameters()
/// afterwards. It writes the Model without any engine's lock: call it when no
/// engine of this Model runs on another thread (load_checkpoint takes the
/// engine's lock).
void load_parameters(const std::string& path, Model& model);

}  // namespace vjit
