#include "api/api.h"

int main(int argc, char** argv) { return trainer::api::trainerd_main(argc, argv); }
