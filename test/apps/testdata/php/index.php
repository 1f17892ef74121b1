<?php
// The shop's pages: every one starts the session, as most PHP apps do, so
// a probe here makes one session file per request.
session_start();
echo "welcome\n";
