/* The pod sandbox ("pause") process: holds the pod's namespaces, reaps orphaned
 * children (it is PID 1 of the pod when the PID namespace is shared) and exits on
 * SIGINT/SIGTERM. Same job as Kubernetes' build/pause/linux/pause.c; built here with
 * `gcc -static` because there is no registry to pull registry.k8s.io/pause from. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("trainwarden-pause 1");
    return 0;
  }
  if (getpid() != 1)
    fprintf(stderr, "pause: warning: not PID 1\n");
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  for (;;)
    pause();
}
