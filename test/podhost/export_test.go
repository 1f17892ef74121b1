package podhost

// MountsLock is the machine-wide lock every running host holds shared.
const MountsLock = mountsLock
