// The communicators behind vjit::Distributed (jit/communicator.h) and its
// factories: over MPI when vjit is built with it (VJIT_HAVE_MPI), otherwise one
// process. The only file that calls MPI; the library vjit_distributed
// (vjit::distributed) holds it, so programs that make no communicator link no MPI.
#include "jit/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#ifdef VJIT_HAVE_MPI
#include <mpi.h>
#endif

namespace vjit {

namespace {

using Clock = std::chrono::steady_clock;

// A process count from the launcher's environment, 0 when the variable is unset or not a number.
int env_size(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? 0 : std::atoi(value);
}

}  // namespace

bool Distributed::launched_with_several_processes() {
  return std::max({env_size("OMPI_COMM_WORLD_SIZE"), env_size("PMI_SIZE"), env_size("PMIX_SIZE")}) > 1;
}

#ifdef VJIT_HAVE_MPI

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// out = 0 + part₀ + part₁ + … in rank order, where gathered holds `ranks`
// parts of out.size() floats, one after another.
void add_in_rank_order(const float* gathered, int ranks, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const float* part = gathered + size_t(r) * out.size();
    for (size_t i = 0; i < out.size(); ++i) out[i] += part[i];
  }
}

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<int32_t>() {
  return MPI_INT32_T;
}
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}

// The communicator over an MPI communicator (a duplicate of MPI_COMM_WORLD).
class MpiCommunicator final : public detail::Communicator {
 public:
  MPI_Comm comm = MPI_COMM_NULL;
  double timeout_s = 300;
  bool initialized_mpi = false;  // this object called MPI_Init_thread (and finalizes)
  bool failed = false;           // a collective timed out or failed: abort instead of finalizing
  std::vector<float> gathered;   // scratch of the deterministic sums: every rank's contribution
  std::vector<double> gathered_doubles;

  ~MpiCommunicator() override;
  void allreduce_sum(std::span<float> data) override;
  double allreduce_sum(double value) override;
  int64_t start_sum(std::span<float> data) override;
  bool test_sum(int64_t ticket) override;
  void wait_sum(int64_t ticket) override;
  void broadcast(std::span<float> data, int root) override;
  void broadcast_bytes(std::span<uint8_t> data, int root) override;
  void barrier() override;
  void allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts) override;
  void allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts) override;

  // Polls a non-blocking collective until it completes or the deadline passes.
  void wait(MPI_Request& request, const char* what, int64_t bytes, Clock::time_point start) {
    poll_until_done(request, what, start);
    stats.collectives += 1;
    stats.bytes_sent += bytes;
    stats.seconds += seconds_since(start);
  }

  // MPI progresses a non-blocking collective only inside MPI calls (no
  // progress thread), and a collective of a megabyte takes tens of rounds
  // between the ranks: poll in a tight loop for the first 0.2 s, then,
  // waiting for a slow or dead rank, every millisecond. Measured on the
  // loaded 2-core machine, 2 ranks, 1 MB: 0.7-0.9 ms per exchange polling
  // tightly; 6-7 ms with sched_yield between polls (another process then
  // takes the core for its time slice), as with a 50 µs sleep. The deadline
  // counts from `started`, when the collective began.
  void poll_until_done(MPI_Request& request, const char* what, Clock::time_point started) {
    const auto waiting_since = Clock::now();
    while (!test(request, what, started))
      if (seconds_since(waiting_since) > 0.2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // One MPI_Test: true when the collective completed; throws on an error or
  // once it has run longer than the deadline.
  bool test(MPI_Request& request, const char* what, Clock::time_point started) {
    int done = 0;
    const int error = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (error != MPI_SUCCESS) fail(what, "failed (" + error_string(error) + ")");
    if (!done && seconds_since(started) > timeout_s)
      fail(what, "did not complete within " + std::to_string(int(timeout_s)) +
                     " s (VJIT_DIST_TIMEOUT): another rank died, hangs or left the job");
    return done != 0;
  }

  // A sum started by start_sum; tickets index `pending`, entries are reused.
  struct PendingSum {
    MPI_Request request = MPI_REQUEST_NULL;
    std::span<float> data;
    std::vector<float> gathered;  // deterministic: every rank's data, in rank order
    Clock::time_point started;
    bool done = false, waited = false;
  };
  std::vector<PendingSum> pending;
  size_t started_sums = 0, waited_sums = 0;

  const char* sum_name() const { return deterministic ? "MPI_Iallgather (gradient sum)" : "MPI_Iallreduce"; }

  // Tests every started sum that is not complete (MPI_Test progresses them).
  void test_pending() {
    for (size_t i = 0; i < started_sums; ++i) {
      PendingSum& sum = pending[i];
      if (!sum.done) sum.done = test(sum.request, sum_name(), sum.started);
    }
  }

  [[noreturn]] void fail(const char* what, const std::string& why) {
    failed = true;
    throw DistributedError("vjit::Distributed: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " +
                           what + " " + why + "; the communicator cannot be used any more (the job is aborted "
                           "when this process exits)");
  }

  static std::string error_string(int error) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(error, text, &length);
    return std::string(text, size_t(length));
  }

  void check_usable() const {
    VJIT_USER_CHECK(!failed, "vjit::Distributed: rank " << rank
                                                        << ": a collective failed before; the communicator cannot be used");
  }

  // The counts first (one collective), then the data (a second).
  template <typename T>
  void allgather_variable(std::span<const T> mine, std::vector<T>& all,
                          std::vector<int64_t>& counts) {
    MpiCommunicator& m = *this;
    counts.assign(size_t(m.size), 0);
    const int64_t count = int64_t(mine.size());
    auto start = Clock::now();
    MPI_Request request;
    m.start(MPI_Iallgather(&count, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, m.comm, &request),
            "MPI_Iallgather (counts)");
    m.wait(request, "MPI_Iallgather (counts)", 8, start);
    std::vector<int> sizes(size_t(m.size)), offsets(size_t(m.size));
    int64_t total = 0;
    for (int r = 0; r < m.size; ++r) {
      VJIT_USER_CHECK(total + counts[size_t(r)] <= int64_t(INT32_MAX),
                      "Distributed::allgather: more than 2^31 elements gathered");
      offsets[size_t(r)] = int(total);
      sizes[size_t(r)] = int(counts[size_t(r)]);
      total += counts[size_t(r)];
    }
    all.resize(size_t(total));
    start = Clock::now();
    m.start(MPI_Iallgatherv(mine.data(), int(count), mpi_type<T>(), all.data(), sizes.data(), offsets.data(),
                            mpi_type<T>(), m.comm, &request),
            "MPI_Iallgatherv");
    m.wait(request, "MPI_Iallgatherv", count * int64_t(sizeof(T)), start);
  }

  void start(int error, const char* what) {
    if (error != MPI_SUCCESS) fail(what, "could not start (" + error_string(error) + ")");
  }
};

}  // namespace

std::shared_ptr<Distributed> Distributed::world(const Options& options) {
  static std::mutex mutex;
  static std::shared_ptr<Distributed> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (world) return world;
  auto impl = std::make_unique<MpiCommunicator>();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    VJIT_USER_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS,
                    "vjit::Distributed::world: MPI_Init_thread failed");
    impl->initialized_mpi = true;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm);
  // Errors come back as codes (DistributedError) instead of aborting in MPI.
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  // The sums run on the host whatever the device: auto is on.
  impl->deterministic = options.deterministic != Lever::Off;
  impl->timeout_s = options.dist_timeout;
  world.reset(new Distributed(std::move(impl)));
  return world;
}

bool Distributed::available() { return true; }

MpiCommunicator::~MpiCommunicator() {
  if (failed) {
    // Pending collectives cannot be finished or cancelled: end the whole job
    // rather than hang in MPI_Finalize.
    MPI_Abort(MPI_COMM_WORLD, 1);
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Comm_free(&comm);
  if (initialized_mpi) MPI_Finalize();
}

void MpiCommunicator::allreduce_sum(std::span<float> data) {
  MpiCommunicator& m = *this;
  m.check_usable();
  if (m.size == 1 || data.empty()) return;
  for (size_t begin = 0; begin < data.size(); begin += size_t(Distributed::kBucketFloats)) {
    const int n = int(std::min<size_t>(data.size() - begin, size_t(Distributed::kBucketFloats)));
    float* bucket = data.data() + begin;
    const auto start = Clock::now();
    MPI_Request request;
    if (!m.deterministic) {
      m.start(MPI_Iallreduce(MPI_IN_PLACE, bucket, n, MPI_FLOAT, MPI_SUM, m.comm, &request), "MPI_Iallreduce");
      m.wait(request, "MPI_Iallreduce", int64_t(n) * 4, start);
      continue;
    }
    // Gather every rank's bucket, then add them in rank order: the same sum,
    // bitwise, on every rank and in every run.
    m.gathered.resize(size_t(n) * size_t(m.size));
    m.start(MPI_Iallgather(bucket, n, MPI_FLOAT, m.gathered.data(), n, MPI_FLOAT, m.comm, &request),
            "MPI_Iallgather (gradient sum)");
    m.wait(request, "MPI_Iallgather (gradient sum)", int64_t(n) * 4, start);
    add_in_rank_order(m.gathered.data(), m.size, std::span<float>(bucket, size_t(n)));
  }
}

int64_t MpiCommunicator::start_sum(std::span<float> data) {
  MpiCommunicator& m = *this;
  m.check_usable();
  VJIT_INTERNAL_CHECK(int64_t(data.size()) <= Distributed::kBucketFloats, "start_sum of " << data.size() << " floats");
  if (m.started_sums == m.pending.size()) m.pending.emplace_back();
  const int64_t ticket = int64_t(m.started_sums++);
  PendingSum& sum = m.pending[size_t(ticket)];
  sum.data = data;
  sum.started = Clock::now();
  sum.waited = false;
  sum.done = m.size == 1 || data.empty();
  if (sum.done) return ticket;
  const int n = int(data.size());
  if (m.deterministic) {
    sum.gathered.resize(data.size() * size_t(m.size));
    m.start(MPI_Iallgather(data.data(), n, MPI_FLOAT, sum.gathered.data(), n, MPI_FLOAT, m.comm, &sum.request),
            m.sum_name());
  } else {
    m.start(MPI_Iallreduce(MPI_IN_PLACE, data.data(), n, MPI_FLOAT, MPI_SUM, m.comm, &sum.request), m.sum_name());
  }
  m.stats.seconds += seconds_since(sum.started);
  return ticket;
}

bool MpiCommunicator::test_sum(int64_t ticket) {
  MpiCommunicator& m = *this;
  m.check_usable();
  VJIT_INTERNAL_CHECK(ticket >= 0 && size_t(ticket) < m.started_sums, "test_sum of ticket " << ticket);
  const auto start = Clock::now();
  m.test_pending();
  m.stats.seconds += seconds_since(start);
  return m.pending[size_t(ticket)].done;
}

void MpiCommunicator::wait_sum(int64_t ticket) {
  MpiCommunicator& m = *this;
  m.check_usable();
  VJIT_INTERNAL_CHECK(ticket >= 0 && size_t(ticket) < m.started_sums && !m.pending[size_t(ticket)].waited,
                      "wait_sum of ticket " << ticket);
  PendingSum& sum = m.pending[size_t(ticket)];
  const auto start = Clock::now();
  if (!sum.done) m.poll_until_done(sum.request, m.sum_name(), sum.started);
  sum.done = sum.waited = true;
  if (m.size > 1 && !sum.data.empty()) {
    if (m.deterministic) add_in_rank_order(sum.gathered.data(), m.size, sum.data);
    m.stats.collectives += 1;
    m.stats.bytes_sent += int64_t(sum.data.size()) * 4;
  }
  m.stats.seconds += seconds_since(start);
  if (++m.waited_sums == m.started_sums) m.started_sums = m.waited_sums = 0;
}

double MpiCommunicator::allreduce_sum(double value) {
  MpiCommunicator& m = *this;
  m.check_usable();
  if (m.size == 1) return value;
  m.gathered_doubles.resize(size_t(m.size));
  const auto start = Clock::now();
  MPI_Request request;
  m.start(MPI_Iallgather(&value, 1, MPI_DOUBLE, m.gathered_doubles.data(), 1, MPI_DOUBLE, m.comm, &request),
          "MPI_Iallgather (objective)");
  m.wait(request, "MPI_Iallgather (objective)", 8, start);
  double sum = 0;
  for (double part : m.gathered_doubles) sum += part;
  return sum;
}

void MpiCommunicator::broadcast(std::span<float> data, int root) {
  MpiCommunicator& m = *this;
  m.check_usable();
  if (m.size == 1 || data.empty()) return;
  for (size_t begin = 0; begin < data.size(); begin += size_t(Distributed::kBucketFloats)) {
    const int n = int(std::min<size_t>(data.size() - begin, size_t(Distributed::kBucketFloats)));
    const auto start = Clock::now();
    MPI_Request request;
    m.start(MPI_Ibcast(data.data() + begin, n, MPI_FLOAT, root, m.comm, &request), "MPI_Ibcast");
    m.wait(request, "MPI_Ibcast", m.rank == root ? int64_t(n) * 4 : 0, start);
  }
}

void MpiCommunicator::broadcast_bytes(std::span<uint8_t> data, int root) {
  MpiCommunicator& m = *this;
  m.check_usable();
  VJIT_USER_CHECK(data.size() <= size_t(INT32_MAX), "Distributed::broadcast_bytes: more than 2^31 bytes");
  if (m.size == 1 || data.empty()) return;
  const auto start = Clock::now();
  MPI_Request request;
  m.start(MPI_Ibcast(data.data(), int(data.size()), MPI_BYTE, root, m.comm, &request), "MPI_Ibcast (bytes)");
  m.wait(request, "MPI_Ibcast (bytes)", m.rank == root ? int64_t(data.size()) : 0, start);
}

void MpiCommunicator::barrier() {
  MpiCommunicator& m = *this;
  m.check_usable();
  if (m.size == 1) return;
  const auto start = Clock::now();
  MPI_Request request;
  m.start(MPI_Ibarrier(m.comm, &request), "MPI_Ibarrier");
  m.wait(request, "MPI_Ibarrier", 0, start);
}

void MpiCommunicator::allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts) {
  check_usable();
  allgather_variable(mine, all, counts);
}

void MpiCommunicator::allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts) {
  check_usable();
  allgather_variable(mine, all, counts);
}

#else  // without MPI: one process

namespace {

// Rank 0 of 1: every collective returns its input.
class OneProcessCommunicator final : public detail::Communicator {
 public:
  void allreduce_sum(std::span<float>) override {}
  double allreduce_sum(double value) override { return value; }
  int64_t start_sum(std::span<float>) override { return 0; }
  bool test_sum(int64_t) override { return true; }
  void wait_sum(int64_t) override {}
  void broadcast(std::span<float>, int) override {}
  void broadcast_bytes(std::span<uint8_t>, int) override {}
  void barrier() override {}
  void allgather(std::span<const int32_t> mine, std::vector<int32_t>& all, std::vector<int64_t>& counts) override {
    all.assign(mine.begin(), mine.end());
    counts.assign(1, int64_t(mine.size()));
  }
  void allgather(std::span<const float> mine, std::vector<float>& all, std::vector<int64_t>& counts) override {
    all.assign(mine.begin(), mine.end());
    counts.assign(1, int64_t(mine.size()));
  }
};

}  // namespace

std::shared_ptr<Distributed> Distributed::world(const Options& options) {
  VJIT_USER_CHECK(!launched_with_several_processes(),
                  "vjit::Distributed::world: this process was started as one of several (mpirun), but vjit was "
                  "built without MPI: install libopenmpi-dev (scripts/install-deps.sh) and rebuild");
  static std::shared_ptr<Distributed> world;
  static std::once_flag once;
  std::call_once(once, [&] {
    auto impl = std::make_unique<OneProcessCommunicator>();
    impl->deterministic = options.deterministic != Lever::Off;
    world.reset(new Distributed(std::move(impl)));
  });
  return world;
}

bool Distributed::available() { return false; }

#endif

}  // namespace vjit
