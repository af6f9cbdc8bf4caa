// Step times from device events (see the class below): the trainer's clock,
// so that timing costs the device no waits.

#ifndef GRAPHC_RUNTIME_TRAIN_STEP_CLOCK_H_
#define GRAPHC_RUNTIME_TRAIN_STEP_CLOCK_H_

#include <vector>

#include "contract/status.h"
#include "runtime/core/backend.h"
#include "runtime/train/trainer.h"

namespace graphc::runtime {

// Times steps with events on the compute stream: a step's time is from the
// previous step's end (or the window's start) to its own end, as the device
// saw it, so enqueueing ahead costs no accuracy and needs no host wait.
class StepClock {
 public:
  explicit StepClock(Backend& backend) : backend_(backend) {}
  ~StepClock() {
    for (Event e : events_) backend_.DestroyEvent(e);
  }
  Status Initialize() {
    for (int i = 0; i <= kClockWindow; ++i) {
      StatusOr<Event> event = backend_.CreateEvent(/*timed=*/true);
      if (!event.ok()) return event.status();
      events_.push_back(*event);
    }
    return Status::Ok();
  }
  // Marks the start of a window (after host work that is not a step's).
  Status Start() {
    pending_ = 0;
    return backend_.RecordEvent(events_[0], Stream::kCompute);
  }
  Status StepDone() { return backend_.RecordEvent(events_[++pending_], Stream::kCompute); }
  bool full() const { return pending_ == kClockWindow; }
  // Waits for the window's steps and appends their milliseconds to `ms`.
  Status Collect(std::vector<double>& ms) {
    if (pending_ == 0) return Status::Ok();
    Status status = backend_.SynchronizeEvent(events_[pending_]);
    if (!status.ok()) return status;
    for (int i = 1; i <= pending_; ++i) {
      StatusOr<double> elapsed = backend_.ElapsedMilliseconds(events_[i - 1], events_[i]);
      if (!elapsed.ok()) return elapsed.status();
      ms.push_back(*elapsed);
    }
    pending_ = 0;
    return Status::Ok();
  }

 private:
  Backend& backend_;
  std::vector<Event> events_;
  int pending_ = 0;
};

}  // namespace graphc::runtime

#endif  // GRAPHC_RUNTIME_TRAIN_STEP_CLOCK_H_
