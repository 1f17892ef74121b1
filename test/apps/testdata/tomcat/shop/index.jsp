<%-- The shop's landing page: a JSP creates a session unless it says
     session="false", so a probe here makes one per request (what the
     readiness probe must not be pointed at). --%>
<%@ page contentType="text/plain" %>welcome
