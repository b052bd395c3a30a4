#include "job/job.h"

int main(int argc, char** argv) { return trainer::job::job_main(argc, argv); }
