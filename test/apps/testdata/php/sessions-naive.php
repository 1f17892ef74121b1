<?php
// The count as docs/opting-in.md gave it before: session_save_path() alone.
// With no php.ini it is empty, so this globs /sess_* and reads 0 however
// many users are logged in (TestApps/php asserts it, to show why the
// recipe reads the save path's last part or the temporary directory).
echo count(glob(session_save_path() . '/sess_*') ?: []), "\n";
