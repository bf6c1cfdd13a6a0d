// dropout kernels (to be filled in).
#pragma once
