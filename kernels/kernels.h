// kernels/: the public header of the folder. One header per kernel family; each launcher
// validates its arguments and documents its thread mapping and tensor shapes.
#pragma once

#include "kernels/copy.h"
