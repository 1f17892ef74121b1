<%@ page contentType="text/plain" session="false" %><%
  jakarta.servlet.http.HttpSession s = request.getSession(false);
  if (s != null) { s.invalidate(); }
%>logged out
