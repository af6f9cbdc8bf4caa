// A shared object with a constructor, for elf_check_test.cc: what a hostile
// plan would embed to run code the moment its library is loaded. The
// constructor creates the file named by GRAPHC_CONSTRUCTOR_MARKER.

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void RunsWhenLoaded(void) {
  const char* marker = getenv("GRAPHC_CONSTRUCTOR_MARKER");
  if (marker != NULL) close(open(marker, O_CREAT | O_WRONLY, 0644));
}

void graphc_kernel_k0_l0(void** buffers, long begin, long end) {
  (void)buffers;
  (void)begin;
  (void)end;
}
const char graphc_signature_k0_l0[] =
    "graphc-launch-v1 kernel=k0 launch=0 iterations=10 args=0,1 bytes=160,160";
