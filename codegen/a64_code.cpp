#include "codegen/a64_code.h"

#include <sys/mman.h>

#include "codegen/perf_map.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

// Records the first error asmjit reports.
class RecordingErrorHandler : public asmjit::ErrorHandler {
 public:
  void handleError(asmjit::Error err, const char* message, asmjit::BaseEmitter*) override {
    if (error == asmjit::kErrorOk) {
      error = err;
      text = message;
    }
  }
  asmjit::Error error = asmjit::kErrorOk;
  std::string text;
};

}  // namespace

A64Code::A64Code(const std::string& name, const std::function<void(asmjit::a64::Assembler&)>& emit, bool perf_map) {
  asmjit::CodeHolder holder;
  RecordingErrorHandler errors;
  holder.init(asmjit::Environment(asmjit::Arch::kAArch64));
  holder.setErrorHandler(&errors);
  asmjit::a64::Assembler assembler(&holder);
  emit(assembler);
  assembler.finalize();
  if (errors.error == asmjit::kErrorOk) holder.flatten();
  if (errors.error == asmjit::kErrorOk) holder.resolveUnresolvedLinks();
  VJIT_INTERNAL_CHECK(errors.error == asmjit::kErrorOk, name << ": asmjit refused the code: " << errors.text);

  size_ = holder.codeSize();
  void* pages = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  VJIT_INTERNAL_CHECK(pages != MAP_FAILED, name << ": mmap of " << size_ << " bytes failed");
  memory_ = static_cast<std::uint8_t*>(pages);
  asmjit::Error error = holder.relocateToBase(reinterpret_cast<std::uint64_t>(memory_));
  if (error == asmjit::kErrorOk) error = holder.copyFlattenedData(memory_, size_);
  const char* failure = nullptr;
  if (error != asmjit::kErrorOk) failure = asmjit::DebugUtils::errorAsString(error);
  else if (::mprotect(memory_, size_, PROT_READ | PROT_EXEC) != 0) failure = "mprotect(PROT_READ | PROT_EXEC) failed";
  if (failure != nullptr) {
    ::munmap(memory_, size_);
    VJIT_INTERNAL_CHECK(false, name << ": the code could not be placed: " << failure);
  }
  __builtin___clear_cache(reinterpret_cast<char*>(memory_), reinterpret_cast<char*>(memory_ + size_));
  if (perf_map) register_perf_map(memory_, size_, name);
}

A64Code::~A64Code() { ::munmap(memory_, size_); }

}  // namespace vjit::codegen
